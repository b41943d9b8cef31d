// Replays the steps measured on an H200 (tests/data/*.jsonl, each row with its stack record)
// against the predictors, so an accuracy regression fails CI on a machine without a GPU.
//
// What the data supports, and so what is asserted:
// - a fit decision is safe: `required` (peak plus the allocator margin) is at or above the real
//   allocated peak of every measured step, first and steady state;
// - max-batch under an allocator cap is the real largest batch or one below it, never above;
// - the closed-form peak is an upper bound of every measured allocated peak (its slack bounded by
//   the allocator's rules), shared-process steps and the fit trials included, within a looseness
//   of 1.43 (small models: hundreds of blocks that may each hold 1 MiB unsplit), median under 1.05;
// - the exact path (recorded step programs through the allocator model, vramfit/detail/simulate.hpp):
//   every measured step of a recorded kind at or above its real peak, within 0.5%, mostly to
//   the byte, for both stacks (hf-peft arms each in a process of their own, as a trainer runs);
// - held-out steps (models, ranks and lengths in no other data, predicted as the CLI does): none
//   under, within 0.7% (the first set, which led to the scattered placements; see the tests) and
//   0.02% (the second, measured after). The fit decision (`required`) is safe on all of them.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <set>
#include <vector>

#include "vramfit/predictor.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/detail/replay.hpp"
#include "vramfit/estimate.hpp"

namespace {

using namespace vramfit;
using namespace vramfit::detail;

struct Envelope {
  double low;
  double high;
};

Measurements load(const char* file, const char* stack) {
  return load_measurements(std::string(VRAMFIT_TEST_DATA_DIR) + "/" + file, stack);
}

template <class Predictor>
void replay_steps(const Measurements& data, const Predictor& predictor, Envelope envelope, std::size_t minimum_rows) {
  REQUIRE(data.steps.size() >= minimum_rows);  // the data is there: a missing or empty file fails
  double lowest = 1e9, highest = 0;
  for (const MeasuredStep& m : data.steps) {
    for (PeakOver over : {PeakOver::first_step, PeakOver::steady}) {
      Step s = m.step;
      s.peak_over = over;
      const Prediction p = predictor.predict(m.shape, s);
      const double real = static_cast<double>(m.real(over).count());
      const double ratio = static_cast<double>(p.peak.count()) / real;
      lowest = std::min(lowest, ratio);
      highest = std::max(highest, ratio);
      CAPTURE(m.line);
      CAPTURE(m.model);
      CAPTURE(to_string(over));
      CAPTURE(ratio);
      CHECK(p.required >= m.real(over));  // "fits" never admits a step whose real peak is larger
      CHECK(ratio >= envelope.low);
      CHECK(ratio <= envelope.high);
    }
  }
  MESSAGE("pred/real over " << data.steps.size() << " steps (first and steady): " << lowest << " .. " << highest);
}

}  // namespace

TEST_CASE("hf-peft: measured HF transformers + PEFT steps (H200, torch 2.11, transformers 5.17, peft 0.21)") {
  replay_steps(load("hf_steps.jsonl", "hf-peft"), HfPeftPredictor{}, {1.0, 1.29}, 150);
}

// The answer by simulation is the real largest batch or one below it; the closed form's (its margin
// covers reserved memory with no limit) is never above it.
TEST_CASE("hf-peft: max-batch under an allocator cap is the real largest batch or one below it") {
  const Measurements data = load("hf_steps.jsonl", "hf-peft");
  REQUIRE(data.max_batches.size() >= 4);
  for (const MeasuredMaxBatch& m : data.max_batches) {
    const SearchResult simulated = max_batch(m.shape, m.step, Budget(m.cap));
    const std::uint64_t closed = HfPeftPredictor{}.max_batch(m.shape, m.step, Budget(m.cap));
    CAPTURE(m.line);
    CAPTURE(m.model);
    CAPTURE(m.max_batch);
    CAPTURE(simulated.value);
    CAPTURE(closed);
    CHECK(simulated.at.method == Method::allocator_simulation);
    CHECK(simulated.value <= m.max_batch);
    CHECK(simulated.value + 1 >= m.max_batch);
    CHECK(closed <= m.max_batch);
  }
}

TEST_CASE("libtorch: measured reference steps of the Probe (H200, LibTorch 2.11)") {
  replay_steps(load("libtorch_steps.jsonl", "libtorch"), LibTorchPredictor{}, {1.0, 1.42}, 100);
}

namespace {
struct SimulatedTally {
  std::size_t checks = 0, exact = 0, under = 0;
  double lowest = 1e9, highest = 0;

  // Counts one check and asserts its pred/real within [low, high] (the caller captures the row).
  void add(Bytes predicted, Bytes real, double low, double high) {
    const double ratio = static_cast<double>(predicted.count()) / static_cast<double>(real.count());
    CAPTURE(ratio);
    CHECK(ratio >= low);
    CHECK(ratio <= high);
    ++checks;
    exact += predicted == real ? 1 : 0;
    under += predicted < real ? 1 : 0;
    lowest = std::min(lowest, ratio);
    highest = std::max(highest, ratio);
  }
};

// A measured step estimated in the flow that measured it: on top of what the process held before
// the arm (hf-peft: its recorded pre_arm_allocated), the cache emptied after the build where the
// harness emptied it; libtorch in the Probe's flow. `estimate` is a pure function of these inputs,
// so a repeat of an arm (65 repeats of 88 arms in hf_steps.jsonl, 54 in the shared-process file)
// reuses its first estimate: a simulation each is most of this file's time.
Estimate estimate_as_measured(const MeasuredStep& m, Stack stack, PeakOver over) {
  if (stack == Stack::hf_peft) REQUIRE(m.baseline.has_value());
  Step s = m.step;
  s.peak_over = over;
  struct Known {
    ModelShape shape;
    Step step;
    Stack stack;
    std::optional<Bytes> held_before;
    bool cache_emptied_after_build;
    Estimate estimate;
  };
  static std::vector<Known> known;
  for (const Known& k : known)
    if (k.shape == m.shape && k.step == s && k.stack == stack && k.held_before == m.baseline &&
        k.cache_emptied_after_build == m.cache_emptied_after_build)
      return k.estimate;
  const Estimate e =
      estimate(m.shape, s, stack, {.held_before = m.baseline, .cache_emptied_after_build = m.cache_emptied_after_build});
  known.push_back({m.shape, s, stack, m.baseline, m.cache_emptied_after_build, e});
  return e;
}
std::optional<Simulation> simulate_hf_as_measured(const MeasuredStep& m) {
  return estimate_as_measured(m, Stack::hf_peft, m.step.peak_over).simulation;
}
std::optional<Simulation> simulate_libtorch_as_measured(const MeasuredStep& m) {
  return estimate_as_measured(m, Stack::libtorch, m.step.peak_over).simulation;
}

// Every measured step whose kind has a recorded program, simulated, first step and steady state;
// with `models`, only the steps of those models.
template <class Simulate>
SimulatedTally replay_simulated(const Measurements& data, Simulate simulate, double low, double high,
                                std::initializer_list<std::string_view> models = {}) {
  SimulatedTally t;
  for (const MeasuredStep& m : data.steps) {
    if (models.size() != 0 && std::find(models.begin(), models.end(), m.model) == models.end()) continue;
    const auto r = simulate(m);
    if (!r) continue;
    for (PeakOver over : {PeakOver::first_step, PeakOver::steady}) {
      CAPTURE(m.line);
      CAPTURE(m.model);
      CAPTURE(to_string(over));
      t.add(over == PeakOver::first_step ? r->first : r->steady, m.real(over), low, high);
    }
  }
  MESSAGE("simulated " << t.checks << " checks: " << t.exact << " exact to the byte, " << t.under
                       << " under; pred/real " << t.lowest << " .. " << t.highest);
  return t;
}
}  // namespace

// The exact path: every measured HF + PEFT step of a recorded kind (LoRA and full fine-tuning;
// vramfit/detail/simulate.hpp), its recorded step program run through the allocator model, as the harness
// ran it (cache emptied after the build, on top of what the process held before the arm).
// A case per model: the checks (LoRA and full, first and steady) and the exact ones as README.md's
// accuracy table has them, 306 and 254 in all.
namespace {
void replay_hf_steps(std::string_view model, std::size_t checks, std::size_t exact) {
  const SimulatedTally t =
      replay_simulated(load("hf_steps.jsonl", "hf-peft"), simulate_hf_as_measured, 1.0, 1.003, {model});
  CHECK(t.checks == checks);
  CHECK(t.exact >= exact);
  CHECK(t.under == 0);
}
}  // namespace
TEST_CASE("hf-peft: recorded step programs give the measured peaks: SmolLM2-135M") {
  replay_hf_steps("SmolLM2-135M", 88, 70);
}
TEST_CASE("hf-peft: recorded step programs give the measured peaks: Qwen2.5-0.5B") {
  replay_hf_steps("Qwen2.5-0.5B", 104, 80);
}
TEST_CASE("hf-peft: recorded step programs give the measured peaks: TinyLlama-1.1B") {
  replay_hf_steps("TinyLlama-1.1B", 78, 69);
}
TEST_CASE("hf-peft: recorded step programs give the measured peaks: Llama-3.2-1B") {
  replay_hf_steps("Llama-3.2-1B", 36, 35);
}

// The same arms measured sharing a process, a model build per model (hf_harness.py without
// --isolate: a probe forward and an emptied cache after the build, workspaces and cached blocks
// from earlier arms). Simulated as that flow, three checks read under, each by 1 MiB or less, until
// the scattered placements; they meet them. A case per model (352 checks in all: 88 + 104 + 88 +
// 72), each well inside the suite's 10 s a case.
namespace {
void replay_shared_process(std::string_view model, std::size_t checks) {
  const SimulatedTally t = replay_simulated(
      load("hf_steps_shared_process.jsonl", "hf-peft"),
      [](const MeasuredStep& m) {
        CHECK(m.cache_emptied_after_build);
        return simulate_hf_as_measured(m);
      },
      1.0, 1.003, {model});
  CHECK(t.checks == checks);
  CHECK(t.under == 0);
}
}  // namespace
TEST_CASE("hf-peft: arms that shared a process meet the simulation: SmolLM2-135M") {
  replay_shared_process("SmolLM2-135M", 88);
}
TEST_CASE("hf-peft: arms that shared a process meet the simulation: Qwen2.5-0.5B") {
  replay_shared_process("Qwen2.5-0.5B", 104);
}
TEST_CASE("hf-peft: arms that shared a process meet the simulation: TinyLlama-1.1B") {
  replay_shared_process("TinyLlama-1.1B", 88);
}
TEST_CASE("hf-peft: arms that shared a process meet the simulation: Llama-3.2-1B") {
  replay_shared_process("Llama-3.2-1B", 72);
}

// The Probe's LibTorch steps (tests/data/libtorch_steps.jsonl, each in the Probe's flow: workspaces
// released and the cache emptied before the build), simulated from the libtorch programs.
// A case per model: 72 checks each (LoRA and full, first and steady), exact ones as README.md's
// accuracy table has them (180 of 216 in all). Two full fine-tuning steps (SmolLM2-135M 1 x 1024
// with checkpointing, TinyLlama-1.1B 1 x 3000) read under with segments placed in ascending or
// descending order (by 3.1 MB and 0.6 MB); the driver's order meets them (tests/allocator_test.cpp).
namespace {
void replay_libtorch_steps(std::string_view model, std::size_t exact) {
  const SimulatedTally t =
      replay_simulated(load("libtorch_steps.jsonl", "libtorch"), simulate_libtorch_as_measured, 1.0, 1.005, {model});
  CHECK(t.checks == 72);
  CHECK(t.exact >= exact);
  CHECK(t.under == 0);
}
}  // namespace
TEST_CASE("libtorch: recorded step programs give the measured peaks of the Probe's steps: SmolLM2-135M") {
  replay_libtorch_steps("SmolLM2-135M", 58);
}
TEST_CASE("libtorch: recorded step programs give the measured peaks of the Probe's steps: Qwen2.5-0.5B") {
  replay_libtorch_steps("Qwen2.5-0.5B", 60);
}
TEST_CASE("libtorch: recorded step programs give the measured peaks of the Probe's steps: TinyLlama-1.1B") {
  replay_libtorch_steps("TinyLlama-1.1B", 62);
}

namespace {
// Estimates a held-out step as the CLI does (`vramfit::estimate`: the recorded program where one
// applies, at the step's process baseline, else the closed form). Returns the pred/real tally,
// first and steady.
SimulatedTally replay_held_out(const Measurements& data, Stack stack, double low, double high) {
  SimulatedTally t;
  for (const MeasuredStep& m : data.steps) {
    for (PeakOver over : {PeakOver::first_step, PeakOver::steady}) {
      const Estimate e = estimate_as_measured(m, stack, over);
      CAPTURE(m.line);
      CAPTURE(m.model);
      CAPTURE(to_string(over));
      CHECK(e.required >= m.real(over));  // the fit decision is safe
      t.add(e.peak, m.real(over), low, high);
    }
  }
  MESSAGE("held out: " << t.checks << " checks: " << t.exact << " exact, " << t.under << " under; pred/real "
                       << t.lowest << " .. " << t.highest);
  return t;
}
}  // namespace

// Held-out HF + PEFT arms (tests/validation/heldout_arms.json, each in a process of its own):
// SmolLM2-360M and Qwen2.5-1.5B (head_dim 128), LoRA r=4 and r=32, lengths 1500 to 6000. Before
// the scattered placements, one check read under: SmolLM2-360M full fine-tuning with checkpointing
// at 2 x 1500, first step, by 4.1 MB, at the optimizer step (its trace, replayed at the recorded
// addresses, gives the peak to the byte; the driver's order misses it at every headroom the
// simulation runs: tests/allocator_test.cpp). These checks led to the scattered placements, so they are no longer
// held out from it; the second set below is.
// Two Qwen2.5-1.5B arms (lines 12 and 22) have no program: their peak is the closed form's bound.
TEST_CASE("hf-peft: first held-out set: models, ranks and lengths in no other data") {
  const SimulatedTally t = replay_held_out(
      load("hf_heldout.jsonl", "hf-peft"), Stack::hf_peft, 1.0, 1.02);
  CHECK(t.checks == 40);
  CHECK(t.under == 0);
}

// Held-out Probe steps (Llama-3.2-1B and SmolLM2-360M, lengths 1500 to 5000), several per process
// as `vramfit probe` runs a sweep (libtorch_heldout.jsonl), and the same 29 steps run again, each
// in a `vramfit probe` process of its own (libtorch_heldout_isolated.jsonl). Before the scattered
// placements, two steps of the first file read under, by 3.0 MiB (Llama-3.2-1B 2 x 1536, full
// with checkpointing) and 0.74 MiB, both after other steps in the process: the segments those
// released leave the driver's free space in a shape no rule reproduces. Run alone, Llama-3.2-1B
// 2 x 1536 met the simulation to the byte, and one other step read under instead (SmolLM2-135M
// 1 x 2500 full with checkpointing, by 54,784 B).
TEST_CASE("libtorch: first held-out set, several steps per process and each in its own") {
  for (const char* file : {"libtorch_heldout.jsonl", "libtorch_heldout_isolated.jsonl"}) {
    CAPTURE(std::string(file));
    const SimulatedTally t =
        replay_held_out(load(file, "libtorch"), Stack::libtorch, 1.0, 1.007);
    CHECK(t.checks == 58);
    CHECK(t.under == 0);
  }
}

// The second held-out set, measured after the scattered placements were in: models no data had
// (SmolLM2-1.7B, Qwen2.5-3B, Mistral-7B-v0.1), ranks 8 to 16, lengths 1000 to 6000, batch 1 to 4,
// each step in a process of its own (tests/validation/heldout_arms_2.json; the Probe's steps from
// tests/validation/heldout_probe_2.args).
TEST_CASE("second held-out set: hf-peft and libtorch") {
  const SimulatedTally hf = replay_held_out(load("hf_heldout_2.jsonl", "hf-peft"), Stack::hf_peft, 1.0, 1.03);
  CHECK(hf.checks == 16);
  CHECK(hf.under == 0);
  const SimulatedTally lt = replay_held_out(load("libtorch_heldout_2.jsonl", "libtorch"), Stack::libtorch, 1.0, 1.02);
  CHECK(lt.checks == 16);
  CHECK(lt.under == 0);
}

// `required` covers the larger of both methods: where the simulated peak is above the closed form's
// (SmolLM2-135M full fine-tuning, 1 x 2048), it is the simulated peak plus the allocator margin.
TEST_CASE("estimate: required is the simulated peak plus the margin where the simulation is higher") {
  const Estimate e = estimate(*find_preset("SmolLM2-135M"), Step{.batch = 1, .seq = 2048, .mode = Mode::full});
  REQUIRE(e.simulation.has_value());
  CHECK(e.method == Method::allocator_simulation);
  CHECK(e.peak == e.simulation->peak);
  CHECK(e.peak.count() == 3634080256);
  // The closed form's expected figure (not its bound, which is above the simulation) and its margin.
  const Prediction expected =
      StackDefinition<profiles::HfPeft>::expected_predictor{}.predict(*find_preset("SmolLM2-135M"), Step{.batch = 1, .seq = 2048, .mode = Mode::full});
  CHECK(e.peak > expected.peak);
  CHECK(expected.required.count() == 3817239744);
  CHECK(e.closed_form.peak > e.peak);
  CHECK(e.required == e.peak + simulated_margin(e.peak));
  CHECK(e.required.count() == 3846552360);
}

// The Probe's LibTorch steps run on the H200 after the CLI moved to CLI11 and the estimate into the
// library (SmolLM2-135M, LoRA r=16 on all-linear with checkpointing, 1 and 4 x 1024 and 3000; the
// rows `vramfit probe --json` wrote), estimated as `vramfit predict --stack libtorch` does.
TEST_CASE("libtorch: the Probe's steps after the house move meet the estimate") {
  const SimulatedTally t =
      replay_held_out(load("libtorch_probe_2026-12-04.jsonl", "libtorch"), Stack::libtorch, 1.0, 1.0001);
  CHECK(t.checks == 8);
  CHECK(t.under == 0);
}

namespace {
// The fit trials' completed runs (tests/data/trials_13.jsonl: HF + PEFT, three steps each in a
// fresh process under a memory fraction, default allocator and expandable segments): the model,
// the step and the measured allocated peak over the run.
std::vector<MeasuredStep> completed_trials() {
  const std::string path = std::string(VRAMFIT_TEST_DATA_DIR) + "/trials_13.jsonl";
  std::ifstream in = open_jsonl(path, "trials");
  std::vector<MeasuredStep> out;
  std::string text;
  for (std::size_t line = 1; std::getline(in, text); ++line) {
    const std::string where = "trials_13.jsonl:" + std::to_string(line);
    const nlohmann::json row = parse_row(text, where);
    if (optional_string(row, "kind", "", where) != "trial" || optional_string(row, "outcome", "", where) != "ok") continue;
    MeasuredStep m{optional_string(row, "model", "custom", where), "hf-peft", shape_from(row, where),
                   step_from(row, where, true), {}, {}, 0, line, {}, {}, false};
    m.real_steady = Bytes(require_count(row, "allocated_peak", where));
    out.push_back(m);
  }
  return out;
}
}  // namespace

// The closed form where no program applies is the prediction; with the allocator's slack bounded
// by its rules (terms.hpp: `AllocatorSlackTerm`; tests/validation/README.md, "Closed form as an
// upper bound") it is at or above every measured allocated peak: each arm in its own process,
// arms sharing one after other shapes, held-out sets, the Probe's steps, the fit trials.
TEST_CASE("closed form: an upper bound of every measured allocated peak") {
  std::vector<double> looseness, reserved_looseness;
  double needed_per_mille = 0;
  // Steps: first and steady; a trial's peak is over its three steps, so steady only.
  const auto bound = [&](const std::vector<MeasuredStep>& steps, Stack stack, bool with_first = true) {
    for (const MeasuredStep& m : steps)
      for (PeakOver over : {PeakOver::first_step, PeakOver::steady}) {
        if (over == PeakOver::first_step && !with_first) continue;
        Step s = m.step;
        s.peak_over = over;
        const Prediction p = stack == Stack::libtorch ? LibTorchPredictor{}.predict(m.shape, s)
                                                      : HfPeftPredictor{}.predict(m.shape, s);
        const Bytes closed = p.peak;
        CAPTURE(m.line);
        CAPTURE(m.model);
        CAPTURE(to_string(over));
        CHECK(closed >= m.real(over));
        // `required` covers what the allocator reserved with no limit (over both steps), so a
        // budget that holds it is never reached.
        if (over == PeakOver::steady && m.reserved_peak) {
          CHECK(p.required >= *m.reserved_peak);
          // The per mille of the closed form's peak this step's reserved memory needs over it.
          const double over_peak = static_cast<double>(m.reserved_peak->count()) - static_cast<double>(p.peak.count()) -
                                   static_cast<double>(HfPeftPredictor{}.margin().fixed);
          needed_per_mille = std::max(needed_per_mille, 1000.0 * over_peak / static_cast<double>(p.peak.count()));
          reserved_looseness.push_back(static_cast<double>(p.required.count()) /
                                       static_cast<double>(m.reserved_peak->count()));
        }
        looseness.push_back(static_cast<double>(closed.count()) / static_cast<double>(m.real(over).count()));
      }
  };
  for (const char* file : {"hf_steps.jsonl", "hf_steps_shared_process.jsonl", "hf_heldout.jsonl", "hf_heldout_2.jsonl"}) {
    CAPTURE(std::string(file));
    bound(load(file, "hf-peft").steps, Stack::hf_peft);
  }
  for (const char* file : {"libtorch_steps.jsonl", "libtorch_heldout.jsonl", "libtorch_heldout_isolated.jsonl",
                           "libtorch_heldout_2.jsonl", "libtorch_probe_2026-12-04.jsonl"}) {
    CAPTURE(std::string(file));
    bound(load(file, "libtorch").steps, Stack::libtorch);
  }
  const std::vector<MeasuredStep> trials = completed_trials();
  CHECK(trials.size() >= 35);
  bound(trials, Stack::hf_peft, false);
  REQUIRE(looseness.size() >= 1100);
  std::sort(looseness.begin(), looseness.end());
  const double median = looseness[looseness.size() / 2];
  MESSAGE("closed form / measured allocated peak over " << looseness.size() << " checks: min " << looseness.front()
                                                        << ", median " << median << ", max " << looseness.back());
  CHECK(looseness.front() >= 1.0);
  CHECK(median <= 1.05);
  CHECK(looseness.back() <= 1.43);
  REQUIRE(reserved_looseness.size() >= 350);
  std::sort(reserved_looseness.begin(), reserved_looseness.end());
  MESSAGE("closed form's required / measured reserved peak (no limit) over "
          << reserved_looseness.size() << " steps: min " << reserved_looseness.front() << ", median "
          << reserved_looseness[reserved_looseness.size() / 2] << ", max " << reserved_looseness.back()
          << "; the most reserved over the closed form's peak takes " << needed_per_mille << " per mille");
  CHECK(reserved_looseness.front() >= 1.0);
}

// Qwen3 (q_norm, k_norm) in the plain loop: tests/validation/qwen3_arms.json on an H100
// (gpu_qwen3.sh), each arm in a fresh process. No step program covers q/k norms, so the closed
// form answers; it bounds every step, first and steady. The Qwen3-1.7B arms first failed in the
// harness (their normalized shape carried qk_norm, which it refused) and ran again in
// qwen3_2_h100.jsonl.
TEST_CASE("Qwen3: the closed form bounds every measured step") {
  const Measurements first = load("qwen3_h100.jsonl", "hf-peft");
  const Measurements rerun = load("qwen3_2_h100.jsonl", "hf-peft");
  CHECK(first.steps.size() == 9);
  CHECK(first.skipped == 3 + 5);  // stack, context, end; the five failed Qwen3-1.7B arms
  CHECK(rerun.steps.size() == 5);
  std::vector<MeasuredStep> steps = first.steps;
  steps.insert(steps.end(), rerun.steps.begin(), rerun.steps.end());
  std::set<std::string> models, targets;
  std::set<bool> checkpointing;
  double lo = 1e9, hi = 0;
  for (const MeasuredStep& m : steps) {
    CAPTURE(m.line);
    CAPTURE(m.model);
    REQUIRE(m.shape.qk_norm);
    models.insert(m.model);
    targets.insert(m.step.mode == Mode::full ? std::string("full") : to_string(m.step.lora.targets));
    checkpointing.insert(m.step.gradient_checkpointing);
    const Estimate e = estimate(m.shape, m.step);
    CHECK(e.method == Method::closed_form);
    CHECK(e.no_simulation.find("q/k norms") != std::string_view::npos);
    for (PeakOver over : {PeakOver::first_step, PeakOver::steady}) {
      Step s = m.step;
      s.peak_over = over;
      const double ratio = static_cast<double>(HfPeftPredictor{}.predict(m.shape, s).peak.count()) /
                           static_cast<double>(m.real(over).count());
      CHECK(ratio >= 1.0);
      lo = std::min(lo, ratio);
      hi = std::max(hi, ratio);
    }
  }
  MESSAGE("Qwen3, closed form / measured over ", steps.size(), " steps (first and steady): ", lo, " to ", hi);
  CHECK(models == std::set<std::string>{"Qwen3-0.6B", "Qwen3-1.7B"});
  CHECK(targets == std::set<std::string>{"full", "q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj", "all-linear"});
  CHECK(checkpointing == std::set<bool>{false, true});
  CHECK(hi <= 1.18);  // as loose as tests/validation/README.md says (1.171), not looser
}
