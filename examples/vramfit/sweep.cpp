// `vramfit sweep`: every (seq, batch) pair of the lists, as the record's sweep table or JSON lines
// (one estimate a line). With --budget, the text's exit status is 3 when a step does not fit; with
// --json it is 0 (each line says whether its step fits), so scripts read the lines, not the status.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>  // isatty

#include "common.hpp"

namespace vramfit::cli {
namespace {

class Sweep final : public ModelCommand {
public:
  Sweep(CLI::App& parent, BadValues& bad)
      : ModelCommand(
            add_command(parent, "sweep", "(--model NAME | --config PATH) [--seq N,N,...] [--batch N,N,...] [flags]",
                        "predict every (seq, batch) pair and print the record's sweep table",
                        "0 success (with --json always, unless the input is bad: each line has \"fits\"),\n"
                        "2 bad input, 3 with --budget and without --json: a step does not fit"),
            bad, {.lists = true}) {
    add_switch(*app_, "--json", json_, "print JSON lines instead of text: one object per line, a line per step");
  }

  /// Each step is an estimate (up to about a second with a 256-layer config's simulation): a sweep
  /// is bounded, as max-batch's search is.
  static constexpr std::size_t max_steps = 32;

  void check() const override {
    ModelCommand::check();
    const std::size_t seqs = flags_.seqs.size(), batches = flags_.batches.size();
    if (seqs * batches > max_steps)
      throw InvalidInput(seqs >= batches ? "--seq" : "--batch",
                         fmt::format("a sweep is at most {} steps, got {} seq x {} batch = {}; split it into several "
                                     "runs",
                                     max_steps, seqs, batches, seqs * batches));
  }

  int run(std::FILE* out, std::FILE* err) const override {
    const NamedModel model = flags_.resolve();
    const std::optional<Bytes>& budget = flags_.budget;
    // Progress on a terminal: a sweep of a deep model takes seconds (32 steps of a 256-layer
    // config: about 10 s on 2 cores), and the table comes only once every step is estimated.
    const std::size_t total = flags_.seqs.size() * flags_.batches.size();
    const bool progress = total > 1 && isatty(fileno(err)) == 1;
    std::vector<Row> rows;  // every estimate first: a bad value fails before anything is printed
    for (std::uint64_t seq : flags_.seqs)
      for (std::uint64_t batch : flags_.batches) {
        if (progress) fmt::print(err, "\rsweep: step {} of {} (seq {}, batch {}) ", rows.size() + 1, total, seq, batch);
        const Step step = model.at(batch, seq);
        rows.push_back({step, estimate(model.shape, step, flags_.stack, flags_.context(err))});
      }
    if (progress) fmt::print(err, "\r{:60}\r", "");
    const bool all_fit = !budget || std::all_of(rows.begin(), rows.end(), [&](const Row& r) {
                           return r.estimate.fits(Budget(*budget));
                         });
    if (json_) {
      for (const Row& r : rows) fmt::print(out, "{}\n", json_text(estimate_json(model, r.step, r.estimate, budget)));
      return exit_success;
    }
    std::vector<SweepRow> table;
    for (const Row& r : rows) {
      SweepRow row{.batch = r.step.batch, .seq = r.step.seq, .predicted = r.estimate.peak};
      if (budget) row.fits = r.estimate.fits(Budget(*budget));
      table.push_back(row);
    }
    const Step setup = model.step;
    print_context(out, model,
                  fmt::format("seq {} x batch {}; {}", fmt::join(flags_.seqs, ","), fmt::join(flags_.batches, ","),
                              describe_setup(setup)),
                  setup);
    fmt::print(out, "stack:  {} ({})\nbasis:  {}\n", to_string(flags_.stack), method_text(rows),
               basis(method_text(rows), flags_.stack, rows.front().estimate.provenance));
    if (budget)
      fmt::print(out,
                 "budget: {}; fits: the simulated build and three steps run under it (where no program applies: the "
                 "peak plus the allocator's margin is within it)\n",
                 budget_text(*budget));
    fmt::print(out, "\n{}", sweep_table(table));
    return all_fit ? exit_success : exit_does_not_fit;
  }

private:
  struct Row {
    Step step;
    Estimate estimate;
  };

  /// How the rows' peaks were obtained: the method when all rows share one.
  static std::string method_text(const std::vector<Row>& rows) {
    const Method first = rows.front().estimate.method;
    if (std::all_of(rows.begin(), rows.end(), [&](const Row& r) { return r.estimate.method == first; }))
      return std::string(to_string(first));
    return "allocator simulation where a program applies, else closed form";
  }
};

}  // namespace

std::unique_ptr<Command> add_sweep(CLI::App& app, BadValues& bad) { return std::make_unique<Sweep>(app, bad); }

}  // namespace vramfit::cli
