// Fit trials replayed (issue 13): every measured trial (a fresh process under
// torch.cuda.set_per_process_memory_fraction(budget / total) running the build and three steps,
// tests/validation/hf_harness.py --trials) through `estimate` with its budget and allocator
// settings; the measured OK / OOM must be the simulated verdict of a fresh process, `fits` must
// never say "fits" where a run ran out, and past the programs' range neither may the closed form.
// Reserved peaks are compared and printed. Why the figures agree:
// tests/validation/README.md#fit-decisions-under-a-budget, #fit-trials-on-the-h100 and -h200
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramfit/alloc_conf.hpp"
#include "vramfit/estimate.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/detail/replay.hpp"

using namespace vramfit;
using namespace vramfit::literals;

namespace {
struct TrialFile {
  const char* name;
  Stack stack;
};
// Each file of measured trials and its stack (libtorch: `vramfit probe --budget`). The libtorch
// trials ran on an H100 with trials side by side; the rerun file repeats, with fewer side by side,
// those that ran out of the card's memory rather than the budget (`detail::ran_out_of_card`).
constexpr TrialFile trial_files[] = {
    {"trials_13.jsonl", Stack::hf_peft},
    {"trials_13c.jsonl", Stack::hf_peft},
    {"trials_13_libtorch.jsonl", Stack::libtorch},
    {"trials_13_libtorch_rerun.jsonl", Stack::libtorch},
    {"trials_13_h200.jsonl", Stack::libtorch},
};

// Every trial ran in a fresh process, so its OK / OOM must be the verdict at the placements the GPU
// driver gives a fresh process (`BudgetVerdict::fits_fresh_process`); `fits` (every placement) may
// say OOM where one ran (borderline: libtorch Llama-3.2-1B full, checkpointing, 8 x 2048 at 24 GiB
// fits at the driver's placements and runs out at ascending and 19 of the 32 scattered ones), never
// the reverse. Why: tests/validation/README.md#fit-decisions-under-a-budget

struct Replayed {
  std::uint64_t index = 0;
  std::string label;
  bool measured_ok = false;
  Estimate e;
  std::uint64_t measured_reserved = 0;  // the steps' reserved peak (at the error for an OOM)
};

// c10's format_size, as the OOM message prints a size.
std::string format_size(std::uint64_t size) {
  const double s = static_cast<double>(size);
  if (size <= 1024) return fmt::format("{} bytes", size);
  if (size <= 1048576) return fmt::format("{:.2f} KiB", s / 1024.0);
  if (size <= 1073741824ULL) return fmt::format("{:.2f} MiB", s / 1048576.0);
  return fmt::format("{:.2f} GiB", s / 1073741824.0);
}

Replayed replay(const nlohmann::json& row, Stack stack, const std::string& where) {
  Replayed r;
  r.index = row.at("trial_index").get<std::uint64_t>();
  const std::string outcome = row.at("outcome").get<std::string>();
  REQUIRE_MESSAGE((outcome == "ok" || outcome == "oom"), where << ": outcome " << outcome);
  r.measured_ok = outcome == "ok";
  const ModelShape shape = detail::shape_from(row, where);
  const Step step = detail::step_from(row, where, true);
  // The limit c10 set: setMemoryFraction's allowed_memory_maximum from the fraction the harness gave.
  const std::uint64_t limit =
      memory_fraction_limit(row.at("gpu_total_memory").get<std::uint64_t>(), row.at("fraction").get<double>());
  CHECK_MESSAGE(limit == row.at("allowed_bytes").get<std::uint64_t>(), where);
  RunContext c;
  c.budget = Bytes(limit);
  if (row.contains("context_allocated") && row.at("context_allocated").is_number())
    c.held_before = Bytes(row.at("context_allocated").get<std::uint64_t>());
  if (row.at("alloc_conf").is_string()) c.alloc_conf = parse_alloc_conf(row.at("alloc_conf").get<std::string>(), "alloc_conf");
  r.e = estimate(shape, step, stack, c);
  const auto& reserved = r.measured_ok ? row.at("reserved_peak") : row.at("reserved_peak_at_error");
  r.measured_reserved = reserved.is_number() ? reserved.get<std::uint64_t>() : 0;
  r.label = fmt::format("{:>2} {:<62} b{:<2}", r.index, row.at("case").get<std::string>(), step.batch);
  return r;
}
}  // namespace

TEST_CASE("every measured fit trial's OK / OOM is the simulated verdict under its budget and settings") {
  std::size_t trials = 0, agree = 0, disagree = 0, closed_trials = 0, ooms = 0, same_allocated = 0, same_message = 0;
  std::size_t device_ooms = 0, borderline = 0, ran_simulated = 0, same_reserved = 0;
  std::size_t closed_safe = 0, closed_ok_fits = 0, oks = 0;
  for (const TrialFile& f : trial_files) {
    const std::string path = std::string(VRAMFIT_TEST_DATA_DIR) + "/" + f.name;
    std::ifstream in(path);
    REQUIRE_MESSAGE(in, path);
    std::string text;
    std::size_t line = 0;
    fmt::print("{}: trial, case, batch: measured / simulated (ok*: in a fresh process only); reserved peak measured "
               "/ simulated (MiB)\n", f.name);
    while (std::getline(in, text)) {
      ++line;
      const std::string where = fmt::format("{}:{}", f.name, line);
      const nlohmann::json row = detail::parse_row(text, where);
      if (row.value("kind", "") != "trial") continue;
      if (detail::ran_out_of_card(row)) {
        ++device_ooms;
        continue;
      }
      const Replayed r = replay(row, f.stack, where);
      ++trials;
      REQUIRE_MESSAGE(r.e.verdict.has_value(), where);
      const BudgetVerdict& v = *r.e.verdict;
      // The libtorch trials past the programs' range (batch up to 16) are the closed form's (below).
      if (v.method != Method::allocator_simulation) {
        CHECK_MESSAGE(f.stack == Stack::libtorch, where << ": " << r.e.no_simulation);
        ++closed_trials;
      } else {
        CHECK_MESSAGE(v.fits_fresh_process == r.measured_ok,
                      where << " " << r.label << ": simulated in a fresh process " << (v.fits_fresh_process ? "fits" : "oom"));
        CHECK_MESSAGE((r.measured_ok || !v.fits), where << " " << r.label << ": simulated fits at every placement");
        disagree += v.fits_fresh_process != r.measured_ok ? 1 : 0;
        borderline += v.fits != v.fits_fresh_process ? 1 : 0;
      }
      // The verdict alone (`fit_verdict`, no peaks simulated) is the same decision and figures.
      const BudgetVerdict alone = fit_verdict(r.e.inputs.model, r.e.inputs.step, Budget(v.budget), f.stack, r.e.inputs.context);
      CHECK_MESSAGE((alone.fits == v.fits && alone.fits_fresh_process == v.fits_fresh_process &&
                     alone.reserved_peak == v.reserved_peak && alone.method == v.method &&
                     alone.oom.has_value() == v.oom.has_value()),
                    where);
      agree += v.method == Method::allocator_simulation && v.fits_fresh_process == r.measured_ok ? 1 : 0;
      // An OOM is simulated in the step and phase where it happened.
      if (!r.measured_ok && v.oom) {
        if (row.at("oom_step").is_number()) {  // the probe reports no step or phase
          CHECK_MESSAGE(v.oom->step == row.at("oom_step").get<int>(), where);
          CHECK_MESSAGE(v.oom->phase == row.at("oom_phase").get<std::string>(), where);
        }
        // The figures of PyTorch's message, as it prints them (at the first placement that ran out).
        const std::string message = row.at("oom_message").get<std::string>();
        const auto says = [&](const std::string& piece) { return message.find(piece) != std::string::npos; };
        const bool tried = says("Tried to allocate " + format_size(v.oom->tried_to_allocate.count()) + ".");
        const bool allocated = says(format_size(v.oom->allocated.count()) + " is allocated by PyTorch");
        const bool same =
            tried && allocated && says(format_size(v.oom->reserved_unallocated.count()) + " is reserved by PyTorch");
        CHECK_MESSAGE(tried, where);  // the same request runs out
        ++ooms;
        same_allocated += allocated ? 1 : 0;
        same_message += same ? 1 : 0;
        if (!same) fmt::print("  trial {}: simulated tried {}, allocated {}, unallocated {}; measured: {}\n", r.index,
                              format_size(v.oom->tried_to_allocate.count()), format_size(v.oom->allocated.count()),
                              format_size(v.oom->reserved_unallocated.count()), message.substr(0, 330));
      }
      const auto mib = [](std::uint64_t b) { return static_cast<double>(b) / 1048576.0; };
      fmt::print("  {} {:>3} / {:<3}  {:>9.1f} / {:<9.1f} {:+.1f}{}\n", r.label, r.measured_ok ? "ok" : "oom",
                 v.fits ? "ok" : v.fits_fresh_process ? "ok*" : "oom", mib(r.measured_reserved),
                 mib(v.reserved_peak_fresh_process.count()),
                 mib(v.reserved_peak_fresh_process.count()) - mib(r.measured_reserved),
                 v.oom ? fmt::format("  (simulated OOM: step {} {})", v.oom->step, v.oom->phase) : "");
      // Where no program applies the closed form decides, by `required` within the budget: it must
      // never say "fits" where the run ran out of memory.
      const bool closed_fits = r.e.closed_form.fits(Budget(v.budget));
      CHECK_MESSAGE((r.measured_ok || !closed_fits), where << " " << r.label << ": the closed form says fits");
      closed_safe += (r.measured_ok || !closed_fits) ? 1 : 0;
      closed_ok_fits += (r.measured_ok && closed_fits) ? 1 : 0;
      oks += r.measured_ok ? 1 : 0;
      // Where both ran all three steps, the reserved peaks are the same process's figure.
      if (r.measured_ok && v.fits && r.measured_reserved != 0)
        CHECK_MESSAGE(v.reserved_peak.count() <= r.measured_reserved + r.measured_reserved / 10, where);
      if (r.measured_ok && v.method == Method::allocator_simulation) {
        ++ran_simulated;
        same_reserved += v.reserved_peak_fresh_process.count() == r.measured_reserved ? 1 : 0;
      }
    }
  }
  fmt::print("verdicts: {} of {} simulated trials agree with the fresh process's placements ({} borderline: out of "
             "memory at another placement; {} trials past the programs' range decided by the closed form); of {} OOM "
             "messages, {} print the simulated allocated bytes and {} every simulated figure (the rest differ in "
             "reserved but unallocated: the segments' placement)\n",
             agree, trials - closed_trials, borderline, closed_trials, ooms, same_allocated, same_message);
  CHECK(disagree == 0);
  fmt::print("reserved peak of the trials that ran: the fresh process's placements give it to the byte in {} of {}\n",
             same_reserved, ran_simulated);
  fmt::print("closed form: never fits where a run OOMed in {} of {} trials; says fits for {} of the {} that ran\n",
             closed_safe, trials, closed_ok_fits, oks);
  fmt::print("not replayed: {} trials that ran out of the card's memory, not the budget\n", device_ooms);
  CHECK(trials >= 65);
}

TEST_CASE("Estimate::fits under a budget is the simulation's verdict, with or without a budget in the context") {
  // Trials 1 and 2: SmolLM2-135M, LoRA q,k,v,o, checkpointing, seq 4096, 24 GiB: batch 9 ran, 10 did not.
  const ModelShape shape = preset("SmolLM2-135M");
  Step s;
  s.seq = 4096;
  s.lora.targets = TargetSet::attention();
  s.gradient_checkpointing = true;
  const Budget budget(24_GiB);
  for (const auto& [batch, runs] : {std::pair{9ULL, true}, std::pair{10ULL, false}}) {
    CAPTURE(batch);
    s.batch = batch;
    const Estimate plain = estimate(shape, s);
    CHECK_FALSE(plain.verdict.has_value());
    CHECK(plain.fits(budget) == runs);
    RunContext c;
    c.budget = budget.usable;
    const Estimate decided = estimate(shape, s, Stack::hf_peft, c);
    REQUIRE(decided.verdict.has_value());
    CHECK(decided.verdict->fits == runs);
    CHECK(decided.fits(budget) == runs);
    CHECK(fit_verdict(shape, s, budget).fits == runs);
  }
  // Where no program applies (fp32: recorded in bf16 only), `fit_verdict` is the closed form's
  // `required` within the budget, as `Estimate::fits`.
  s.batch = 4;
  s.precision = Precision::fp32;
  const Estimate closed = estimate(shape, s);
  REQUIRE(closed.method == Method::closed_form);
  for (const Bytes b : {closed.required, closed.required - Bytes(1)}) {
    const BudgetVerdict v = fit_verdict(shape, s, Budget(b));
    CHECK(v.method == Method::closed_form);
    CHECK(v.fits == (b == closed.required));
    CHECK(v.fits == closed.fits(Budget(b)));
  }
}

// `max_batch` on each measured case (a model, step and budget tried at several batches): its answer
// is a batch that ran, and no batch it lists in `oom_below` ran.
TEST_CASE("max_batch answers a batch that ran in every measured case") {
  struct Case {
    Stack stack;
    EstimateInputs inputs;
    std::map<std::uint64_t, bool> ran;  // batch -> measured OK
  };
  std::map<std::string, Case> cases;
  for (const TrialFile& f : trial_files) {
    const std::string path = std::string(VRAMFIT_TEST_DATA_DIR) + "/" + f.name;
    std::ifstream in(path);
    REQUIRE_MESSAGE(in, path);
    std::string text;
    for (std::size_t line = 1; std::getline(in, text); ++line) {
      const std::string where = fmt::format("{}:{}", f.name, line);
      const nlohmann::json row = detail::parse_row(text, where);
      if (row.value("kind", "") != "trial" || detail::ran_out_of_card(row)) continue;
      const Replayed r = replay(row, f.stack, where);
      const std::string key = fmt::format("{} {}", to_string(f.stack), row.at("case").get<std::string>());
      Case& c = cases.try_emplace(key, Case{f.stack, r.e.inputs, {}}).first->second;
      c.ran[r.e.inputs.step.batch] = r.measured_ok;
    }
  }
  std::size_t answered_ran = 0, unmeasured = 0, borderline_ran = 0;
  for (const auto& [key, c] : cases) {
    CAPTURE(key);
    const SearchResult found = max_batch(c.inputs.model, c.inputs.step, Budget(*c.inputs.context.budget), c.stack,
                                         c.inputs.context);
    const auto it = c.ran.find(found.value);
    std::string measured;
    for (const auto& [batch, ok] : c.ran) measured += fmt::format(" {}:{}", batch, ok ? "ok" : "oom");
    fmt::print("  {:<70} max-batch {:>2}  oom_below [{}]  borderline_above [{}]  measured{}\n", key, found.value,
               fmt::join(found.oom_below, ", "), fmt::join(found.borderline_above, ", "), measured);
    CHECK_MESSAGE((it == c.ran.end() || it->second), key << ": max-batch " << found.value << " OOMed, measured" << measured);
    WARN_MESSAGE(it != c.ran.end(), key << ": max-batch " << found.value << " not measured:" << measured);
    answered_ran += it != c.ran.end() && it->second ? 1 : 0;
    unmeasured += it == c.ran.end() ? 1 : 0;
    for (std::uint64_t b : found.oom_below) {
      const auto m = c.ran.find(b);
      CHECK_MESSAGE((m == c.ran.end() || !m->second), key << ": oom_below lists " << b << ", which ran");
    }
    // A borderline value fits in a fresh process, as every trial ran: where measured, it ran.
    for (std::uint64_t b : found.borderline_above) {
      const auto m = c.ran.find(b);
      CHECK_MESSAGE((m == c.ran.end() || m->second), key << ": borderline_above lists " << b << ", which ran out");
      borderline_ran += m != c.ran.end() && m->second ? 1 : 0;
    }
  }
  fmt::print("max-batch: a batch that ran in {} of {} cases, one not measured in {}; {} borderline batches above "
             "an answer ran\n", answered_ran, cases.size(), unmeasured, borderline_ran);
  CHECK(borderline_ran >= 1);  // libtorch Llama-3.2-1B full, checkpointing, 2048, 24 GiB: 8
  CHECK(cases.size() >= 12);
}
