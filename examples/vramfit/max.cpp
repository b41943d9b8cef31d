// `vramfit max-batch` and `vramfit max-seq`: the largest batch (or sequence length) whose step fits
// the budget, from `vramfit::max_batch` / `vramfit::max_seq`, and the estimate there; exit 3 when
// not even 1 fits.

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common.hpp"
#include "vramfit/json.hpp"

namespace vramfit::cli {
namespace {

class Max final : public ModelCommand {
public:
  /// max-batch when `search_batch`, else max-seq.
  Max(CLI::App& parent, BadValues& bad, bool search_batch)
      : ModelCommand(add_command(parent, search_batch ? "max-batch" : "max-seq",
                                 "(--model NAME | --config PATH) --budget SIZE [flags]",
                                 search_batch ? "the largest batch whose step fits the budget"
                                              : "the largest sequence length whose step fits the budget",
                                 "0 success, 2 bad input, 3 not even 1 fits the budget"),
                     bad, {.batch = !search_batch, .seq = search_batch}),
        search_batch_(search_batch) {
    add_switch(*app_, "--json", json_, "print one JSON object instead of text");
  }

  void check() const override {
    ModelCommand::check();
    if (!flags_.budget)
      throw InvalidInput("--budget", "required by " + command_name(*app_) +
                                         " (the memory the allocator may reserve, e.g. --budget 24GiB, or --gpu NAME)");
  }

  int run(std::FILE* out, std::FILE* err) const override {
    const NamedModel model = flags_.resolve();
    const Budget budget(*flags_.budget);
    Step step = search_batch_ ? model.at(model.step.batch, model.step.seq) : model.step;
    const std::string_view what = search_batch_ ? "batch" : "seq";
    // A config's sliding window bounds the sequences vramfit models (`validate(step, config)`): the
    // search tries none past it.
    if (!search_batch_ && model.sliding_window == 1u)
      throw InvalidInput("--config: sliding_window", "is 1: no sequence is shorter than the window, and vramfit "
                                                     "models only those");
    const std::uint64_t seq_limit = model.sliding_window ? std::min<std::uint64_t>(*model.sliding_window - 1, 1ULL << 24)
                                                         : std::uint64_t{1} << 24;
    SearchResult found = search_batch_ ? max_batch(model.shape, step, budget, flags_.stack, flags_.context(err))
                                       : max_seq(model.shape, step, budget, flags_.stack, flags_.context(err), seq_limit);
    // (At the limit the search lists no borderline value above it: none past the window.)
    const bool window_capped =
        !search_batch_ && found.capped && model.sliding_window && *model.sliding_window - 1 == seq_limit;
    const std::uint64_t best = found.value;
    (search_batch_ ? step.batch : step.seq) = best == 0 ? 1 : best;  // the step of `found.at`
    const Estimate& at = found.at;

    if (json_) {
      nlohmann::ordered_json j;  // the answer first
      j[fmt::format("max_{}", what)] = best;
      j["budget_bytes"] = budget.usable.count();
      j["capped"] = found.capped;
      j["provenance"] = provenance_json<nlohmann::ordered_json>(at);
      j["oom_below"] = found.oom_below;  // smaller values that run out of memory under the budget
      j["borderline_above"] = found.borderline_above;  // larger values that fit in a fresh process only
      j["prediction"] = nlohmann::json(at);
      j["stack"] = to_string(at.stack);
      j["model"] = model_json(model);
      j["step"] = nlohmann::json(step);
      fmt::print(out, "{}\n", json_text(j, 2));
    } else {
      print_context(out, model,
                    fmt::format("{} {}, {} searched; {}", search_batch_ ? "seq" : "batch",
                                search_batch_ ? step.seq : step.batch, what, describe_setup(step)),
                    step);
      fmt::print(out, "stack:  {} ({})\nbasis:  {}\nbudget: {}\n\n", to_string(at.stack), to_string(at.method),
                 basis(at), budget_text(budget.usable));
      if (best == 0)
        fmt::print(out, "max {}: 0: not even {} 1 fits; it requires {} (peak {} in the {})\n", what, what, at.required,
                   at.peak, at.phase_words());
      else
        fmt::print(out, "max {}: {}\n  at {} {}: peak {} in the {}, {}\n", what, best, what, best, at.peak, at.phase_words(),
                   at.verdict && at.verdict->method == Method::allocator_simulation
                       ? fmt::format("reserved peak {} under the budget (simulated; {} in a fresh process)",
                                     at.verdict->reserved_peak, at.verdict->reserved_peak_fresh_process)
                       : fmt::format("requires {}", at.required));
      if (!found.oom_below.empty())
        fmt::print(out, "  smaller {} values that run out of memory under this budget: {}\n", what,
                   fmt::join(found.oom_below, ", "));
      if (!found.borderline_above.empty())
        fmt::print(out,
                   "  borderline: {} {} runs in a fresh process (the GPU driver's segment placements) but out of "
                   "memory at another placement\n",
                   what, fmt::join(found.borderline_above, ", "));
      if (window_capped)
        fmt::print(out, "  (capped below the config's sliding window of {} tokens, which vramfit does not model; "
                        "longer sequences may fit)\n", *model.sliding_window);
      else if (found.capped)
        fmt::print(out, "  (the search's limit: larger values may fit too)\n");
      if (!at.simulation && !at.no_simulation.empty())
        fmt::print(out, "  no allocator simulation there: {}; the closed form is the answer\n", at.no_simulation);
    }
    return best > 0 ? exit_success : exit_does_not_fit;
  }

private:
  bool search_batch_;
};

}  // namespace

std::unique_ptr<Command> add_max_batch(CLI::App& app, BadValues& bad) { return std::make_unique<Max>(app, bad, true); }
std::unique_ptr<Command> add_max_seq(CLI::App& app, BadValues& bad) { return std::make_unique<Max>(app, bad, false); }

}  // namespace vramfit::cli
