// `vramfit replay`: every step measured in a file (tests/data/*.jsonl) against its stack's
// estimate (or --stack's), as the record's table or JSON lines; exit 0 when every prediction is at
// or above the real peak, 3 when one is under. With --trace, a recorded allocator trace through
// the caching-allocator model: exit 0 when it gives the measured peaks exactly.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "vramfit/detail/replay.hpp"
#include "vramfit/detail/text_table.hpp"
#include "vramfit/json.hpp"

namespace vramfit::cli {
namespace {

class Replay final : public Command {
public:
  Replay(CLI::App& parent, BadValues& bad)
      : Command(add_command(
            parent, "replay", "(--data FILE.jsonl [--stack hf-peft|hf-trainer|libtorch] | --trace FILE.jsonl) [--json]",
            "predict every step measured in a file (tests/data/*.jsonl) and print predicted, real, pred/real, "
            "verdict; or replay an allocator trace (tests/data/traces/) through the caching-allocator model",
            "0 every prediction at or above the real peak (--trace: the model gives the measured\n"
            "peaks exactly), 2 bad input, 3 an under-prediction (--trace: a peak differs)")) {
    stack_flag_ = add_stack(*app_, bad, stack_);
    add_value(*app_, bad, "--data", "FILE", "a measurements file (JSON lines, as in tests/data/)",
              [this](std::string_view v) { data_ = std::filesystem::path(v); });
    add_value(*app_, bad, "--trace", "FILE",
              "an allocator trace (tests/validation/trace_capture.py writes them; tests/data/traces/ has some)",
              [this](std::string_view v) { trace_ = std::filesystem::path(v); });
    add_value(*app_, bad, "--programs", "FILE|DIR",
              "step programs to simulate with instead of the built-in ones (as predict takes them); the rows must be "
              "of their stack",
              [this](std::string_view v) { programs_path_ = std::filesystem::path(v); });
    add_switch(*app_, "--json", json_, "print JSON lines instead of text: one object per line, a line per step");
  }

  void check() const override {
    if (data_ && trace_) throw InvalidInput("--trace", "give either --data or --trace, not both");
    if (!data_ && !trace_)
      throw InvalidInput("--data", "required by replay (a measurements file, e.g. tests/data/hf_steps.jsonl), "
                                   "or give --trace FILE");
    if (trace_ && stack_given())
      throw InvalidInput("--stack", "does not apply to --trace (a trace has no prediction)");
    if (trace_ && programs_path_)
      throw InvalidInput("--programs", "does not apply to --trace (a trace has no prediction)");
  }

  int run(std::FILE* out, std::FILE*) const override { return trace_ ? run_trace(out) : run_data(out); }

private:
  [[nodiscard]] bool stack_given() const { return given(stack_flag_); }

  int run_data(std::FILE* out) const {
    const vramfit::detail::Measurements data = vramfit::detail::load_measurements(*data_, "hf-peft", "--data");
    if (data.steps.empty()) throw InvalidInput("--data", "no measured steps in '" + data_->string() + "'");
    bool all_safe = true;
    std::vector<SweepRow> table;
    std::string current;
    const auto flush_table = [&] {
      if (!table.empty() && !json_) fmt::print(out, "{}\n", sweep_table(table));
      table.clear();
    };
    std::shared_ptr<const ProgramSet> programs;  // --programs, read for the rows' stack
    Stack programs_stack = Stack::hf_peft;
    for (const vramfit::detail::MeasuredStep& m : data.steps) {
      const Stack stack = stack_given() ? stack_ : parse_stack(m.stack, "stack_profile");
      // As the harness ran it: the cache emptied after the build, on top of what the process held
      // before the arm (its recorded pre_arm_allocated, where there is one).
      RunContext context{.held_before = m.baseline, .cache_emptied_after_build = m.cache_emptied_after_build};
      if (programs_path_) {
        if (!programs || programs_stack != stack) programs = read_programs_flag(*programs_path_, stack);
        programs_stack = stack;
        if (programs->stack != to_string(stack))
          throw InvalidInput("--programs", fmt::format("{} holds step programs of {}; line {} is a step of {}",
                                                       programs->source, programs->stack, m.line, to_string(stack)));
        context.programs = programs;
      }
      const Estimate e = estimate(m.shape, m.step, stack, context);
      const Bytes real = m.real(m.step.peak_over);
      const SweepRow row{.batch = m.step.batch, .seq = m.step.seq, .predicted = e.peak, .real = real,
                         .realised_seq = m.realised_seq};
      all_safe = all_safe && e.peak >= real;
      if (json_) {
        nlohmann::ordered_json j;
        j["line"] = m.line;
        j["model"] = m.model;
        j["stack"] = to_string(e.stack);
        j["step"] = nlohmann::json(m.step);
        j["predicted_bytes"] = e.peak.count();
        j["method"] = to_string(e.method);
        j["closed_form_bytes"] = e.closed_form.peak.count();
        j["programs"] = e.provenance.programs.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.provenance.programs);
        j["real_bytes"] = real.count();
        j["ratio"] = *row.ratio();
        j["verdict"] = row.verdict();
        j["phase"] = e.phase;
        fmt::print(out, "{}\n", json_text(j));
        continue;
      }
      const std::string heading = fmt::format("{} ({}, {}): {}", m.model, to_string(e.stack), to_string(e.method),
                                              describe_setup(m.step));
      if (heading != current) {
        flush_table();
        fmt::print(out, "{}\n", heading);
        current = heading;
      }
      table.push_back(row);
    }
    flush_table();
    if (!json_ && data.skipped != 0)
      fmt::print(out, "({} rows of other kinds or with an error skipped)\n", data.skipped);
    return all_safe ? exit_success : exit_does_not_fit;
  }

  int run_trace(std::FILE* out) const {
    const vramfit::detail::AllocatorTrace t = vramfit::detail::load_trace(*trace_, "--trace");
    const vramfit::detail::TraceReplay r = vramfit::detail::replay_trace(t);
    const bool exact =
        r.peak_allocated == t.peak_allocated && (!t.peak_requested || r.peak_requested == *t.peak_requested);
    std::size_t requests = 0;
    for (const auto e : t.events) requests += e > 0 ? 1 : 0;
    if (json_) {
      nlohmann::ordered_json j;
      j["model"] = t.model;
      j["requests"] = requests;
      j["baseline_bytes"] = t.baseline.count();
      const nlohmann::ordered_json requested =
          t.peak_requested ? nlohmann::ordered_json(t.peak_requested->count()) : nlohmann::ordered_json(nullptr);
      j["measured"] = {{"peak_allocated_bytes", t.peak_allocated.count()}, {"peak_requested_bytes", requested}};
      j["model_replay"] = {{"peak_allocated_bytes", r.peak_allocated.count()},
                           {"peak_requested_bytes", r.peak_requested.count()},
                           {"reserved_bytes", r.reserved.count()},
                           {"segments", r.segments}};
      j["exact"] = exact;
      fmt::print(out, "{}\n", json_text(j));
      return exact ? exit_success : exit_does_not_fit;
    }
    using Align = vramfit::detail::TextTable::Align;
    vramfit::detail::TextTable table({Align::left, Align::right, Align::right, Align::right});
    table.add_row({"", "peak allocated", "peak requested", "slack"});
    const auto slack = [](Bytes a, Bytes b) { return a >= b ? fmt::format("{}", a - b) : std::string("-"); };
    table.add_row({"measured", fmt::format("{}", t.peak_allocated),
                   t.peak_requested ? fmt::format("{}", *t.peak_requested) : std::string("not recorded"),
                   t.peak_requested ? slack(t.peak_allocated, *t.peak_requested) : std::string("-")});
    table.add_row({"allocator model", fmt::format("{}", r.peak_allocated), fmt::format("{}", r.peak_requested),
                   slack(r.peak_allocated, r.peak_requested)});
    fmt::print(out, "{}: {} requests and their frees, {} allocated before the trace\n", t.model, requests, t.baseline);
    fmt::print(out, "{}", table.render());
    fmt::print(out, "{} segments opened, {} reserved; the model {}\n", r.segments, r.reserved,
               exact ? "gives the measured peaks exactly" : "DIFFERS from the measured peaks");
    return exact ? exit_success : exit_does_not_fit;
  }

  Stack stack_ = Stack::hf_peft;
  const CLI::Option* stack_flag_ = nullptr;
  std::optional<std::filesystem::path> data_;   ///< --data: a measurements file
  std::optional<std::filesystem::path> trace_;  ///< --trace: an allocator trace
  std::optional<std::filesystem::path> programs_path_;  ///< --programs
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> add_replay(CLI::App& app, BadValues& bad) { return std::make_unique<Replay>(app, bad); }

}  // namespace vramfit::cli
