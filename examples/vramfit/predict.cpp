// `vramfit predict`: one step's estimate, with the closed form's breakdown by term and phase, and
// with --budget whether it fits (exit 3 when it does not). With --varied-lengths or --lengths, a
// loop of steps of varied lengths up to --seq in one process (dynamic padding).

#include <fmt/format.h>

#include "common.hpp"

namespace vramfit::cli {
namespace {

class Predict final : public ModelCommand {
public:
  Predict(CLI::App& parent, BadValues& bad)
      : ModelCommand(add_command(parent, "predict", "(--model NAME | --config PATH) [flags]",
                                 "predict the peak memory of one step, with its breakdown by term and phase",
                                 "0 success, 2 bad input, 3 with --budget: a step does not fit"),
                     bad, {}) {
    add_switch(*app_, "--varied-lengths", varied_,
               "a loop of steps of any lengths up to --seq in one process (dynamic padding): the allocated peak's "
               "bound over every such loop");
    add_value(*app_, bad, "--lengths", "N[,N...]",
              fmt::format("the loop's lengths in order, at most {}, each 1 to --seq (implies --varied-lengths): "
                          "that loop is simulated too, and decides --budget",
                          VariedLengths::max_steps),
              [this](std::string_view v) { lengths_ = parse_numbers("--lengths", v, true); });
    add_switch(*app_, "--json", json_, "print one JSON object instead of text");
  }

  void check() const override {
    ModelCommand::check();
    if (lengths_.size() > VariedLengths::max_steps)
      throw InvalidInput("--lengths", fmt::format("at most {} lengths are simulated, got {}; --varied-lengths alone "
                                                  "bounds a loop of any length",
                                                  VariedLengths::max_steps, lengths_.size()));
    for (const std::uint64_t q : lengths_)
      if (q > flags_.step.seq)
        throw InvalidInput("--lengths", fmt::format("each length must be at most --seq ({}), got {}", flags_.step.seq, q));
  }

  int run(std::FILE* out, std::FILE* err) const override {
    if (varied_ || !lengths_.empty()) return run_varied(out, err);
    const NamedModel model = flags_.resolve();
    const Step step = model.at(model.step.batch, model.step.seq);
    const Estimate e = estimate(model.shape, step, flags_.stack, flags_.context(err));
    const std::optional<Bytes>& budget = flags_.budget;
    const bool fits = !budget || e.fits(Budget(*budget));
    if (json_) {
      fmt::print(out, "{}\n", json_text(estimate_json(model, step, e, budget), 2));
      return fits ? exit_success : exit_does_not_fit;
    }
    const Prediction& p = e.closed_form;
    print_context(out, model, describe(step), step);
    fmt::print(out, "basis:  {}\n", basis(e));
    // The estimate's peak and required (the simulation's where one ran), then the closed form's
    // breakdown: its own peak and required would contradict the --json figures.
    fmt::print(out, "\nstack:     {}\n{}\n{}", to_string(e.stack), headline(e), breakdown_table(p));
    if (e.simulation)
      fmt::print(out,
                 "\nallocator simulation of the recorded {} step ({} requests): peak {} in the {}\n"
                 "(the prediction above; the table is the closed form's breakdown, {} at its peak)\n"
                 "step programs: {}\n",
                 e.stack == Stack::libtorch ? "LibTorch probe" : "HF + PEFT", e.simulation->requests,
                 e.simulation->peak, e.simulation->phase, p.peak, e.provenance.programs);
    else if (!e.no_simulation.empty())
      fmt::print(out, "\nno allocator simulation: {}; the closed form is the prediction\n", e.no_simulation);
    if (e.simulation && !budget)
      fmt::print(out, "reserved by the allocator at the end of the run (no budget): {}\n", e.simulation->reserved);
    if (e.verdict && e.verdict->method == Method::allocator_simulation) {
      const BudgetVerdict& v = *e.verdict;
      fmt::print(out, "\nallocator simulation under the budget{}: the build and three steps, at every segment placement\n",
                 e.inputs.context.alloc_conf == AllocConf{} ? "" : ", " + to_string(e.inputs.context.alloc_conf));
      if (v.fits)
        fmt::print(out, "fits the budget of {}: no request runs out of memory; reserved peak {} (allocated peak {}), "
                        "headroom {}\n",
                   budget_text(*budget), v.reserved_peak, e.peak,
                   v.reserved_peak <= *budget ? *budget - v.reserved_peak : Bytes{});
      else
        fmt::print(out,
                   "does not fit the budget of {}{}: OUT OF MEMORY in {}{}{}: tried to allocate {}; {} allocated by "
                   "PyTorch, {} reserved but unallocated\nreserved at most {} before that (without a limit the "
                   "allocated peak is {})\n",
                   budget_text(*budget), v.fits_fresh_process ? " at every segment placement (borderline)" : "",
                   v.oom->step == 0 ? "the " : fmt::format("step {}'s ", v.oom->step), v.oom->phase,
                   v.fits_fresh_process ? " at a placement other than a fresh process's" : "",
                   v.oom->tried_to_allocate, v.oom->allocated, v.oom->reserved_unallocated, v.reserved_peak, e.peak);
      if (!v.fits && v.fits_fresh_process)
        fmt::print(out,
                   "a fresh process runs it at the GPU driver's segment placements; one that freed memory before its "
                   "steps may place segments otherwise and run out\n");
    } else if (budget) {
      if (fits)
        fmt::print(out, "\nfits the budget of {}: requires {}, headroom {}\n", budget_text(*budget), e.required,
                   *budget - e.required);
      else
        fmt::print(out, "\ndoes not fit the budget of {}: requires {}, {} over\n", budget_text(*budget), e.required,
                   e.required - *budget);
    }
    return fits ? exit_success : exit_does_not_fit;
  }

private:
  bool varied_ = false;
  std::vector<std::uint64_t> lengths_;

  int run_varied(std::FILE* out, std::FILE* err) const {
    const NamedModel model = flags_.resolve();
    const Step step = model.at(model.step.batch, model.step.seq);
    const VariedLengthsEstimate v =
        estimate_varied_lengths(model.shape, step, VariedLengths{lengths_}, flags_.stack, flags_.context(err));
    const std::optional<Bytes>& budget = flags_.budget;
    const bool fits = !v.verdict || v.verdict->fits;
    if (json_) {
      nlohmann::json j = estimate_json(model, step, v.longest, budget);
      nlohmann::json loop = {{"peak_bytes", v.peak.count()},
                             {"method", to_string(v.method)},
                             {"lengths", lengths_.empty() ? nlohmann::json(nullptr) : nlohmann::json(lengths_)},
                             {"simulated", nullptr}};
      if (v.loop)
        loop["simulated"] = {{"peak_bytes", v.loop->peak.count()},
                             {"phase", v.loop->phase},
                             {"reserved_peak_bytes", v.loop->reserved_peak.count()}};
      if (v.verdict) {
        loop["fits"] = v.verdict->fits;
        loop["fits_fresh_process"] = v.verdict->fits_fresh_process;
        loop["reserved_peak_under_budget_bytes"] = v.verdict->reserved_peak.count();
        j["fits"] = v.verdict->fits;
      }
      j["varied_lengths"] = loop;
      fmt::print(out, "{}\n", j.dump(2));
      return fits ? exit_success : exit_does_not_fit;
    }
    print_context(out, model, describe(step), step);
    fmt::print(out, "basis:  {}\n", basis(v.longest));
    fmt::print(out, "\nvaried lengths up to {} in one process (dynamic padding):\n", step.seq);
    fmt::print(out, "allocated peak at most {} over any lengths ({}; the fixed shape at {}: {})\n", v.peak,
               v.method == Method::allocator_simulation
                   ? "every request at its largest size, every block charged the slack c10 may leave in it"
                   : "the closed form's bound",
               step.seq, v.longest.peak);
    if (v.loop)
      fmt::print(out, "the loop of {} lengths simulated: allocated peak {} in the {}, reserved {} (no budget)\n",
                 lengths_.size(), v.loop->peak, v.loop->phase, v.loop->reserved_peak);
    if (v.verdict) {
      const std::string how = v.loop ? "the loop simulated under the budget at every segment placement"
                                     : "the fixed shape at --seq simulated under the budget and the bound within it; "
                                       "give --lengths to simulate the loop's fragmentation";
      if (v.verdict->fits)
        fmt::print(out, "fits the budget of {} ({})\n", budget_text(*budget), how);
      else if (v.verdict->oom)
        fmt::print(out, "does not fit the budget of {}{}: OUT OF MEMORY in step {}'s {} ({})\n", budget_text(*budget),
                   v.verdict->fits_fresh_process ? " (borderline: a fresh process's segment placements run it)" : "",
                   v.verdict->oom->step, v.verdict->oom->phase, how);
      else
        fmt::print(out, "does not fit the budget of {} ({})\n", budget_text(*budget), how);
    }
    return fits ? exit_success : exit_does_not_fit;
  }
};

}  // namespace

std::unique_ptr<Command> add_predict(CLI::App& app, BadValues& bad) { return std::make_unique<Predict>(app, bad); }

}  // namespace vramfit::cli
