// Replays the steps measured on an H200 (tests/data/*.jsonl, each row with its stack record)
// against the predictors, so an accuracy regression fails CI on a machine without a GPU.
//
// What the data supports, and so what is asserted:
// - a fit decision is safe: `required` (peak plus the allocator margin) is at or above the real
//   allocated peak of every measured step, first and steady state;
// - max-batch under an allocator cap is the real largest batch or one below it, never above;
// - the closed-form peak stays within the measured envelope (a guard against regressions):
//   hf-peft 0.975 to 1.015, libtorch 0.965 to 1.13 (its first step over-predicts by up to 12%);
// - hf-peft LoRA steps through their recorded step programs (vramfit/simulate.hpp): 258 of 280
//   checks exact to the byte, all within 0.9997 to 1.0005, 4 under by 1 MiB or less.
// The project's target band, [1.00, 1.03] for hf-peft and [1.00, 1.02] for libtorch with none
// under 1.00, is NOT met yet: those 4 LoRA checks, full fine-tuning (closed form: 0.990 to 1.002)
// and the libtorch steps (closed form) fall under it.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <string>

#include "vramfit/predictor.hpp"
#include "vramfit/replay.hpp"
#include "vramfit/simulate.hpp"

namespace {

using namespace vramfit;

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
  replay_steps(load("hf_steps.jsonl", "hf-peft"), HfPeftPredictor{}, {0.975, 1.015}, 170);
}

TEST_CASE("hf-peft: max-batch under an allocator cap is the real largest batch or one below it") {
  const Measurements data = load("hf_steps.jsonl", "hf-peft");
  REQUIRE(data.max_batches.size() >= 4);
  for (const MeasuredMaxBatch& m : data.max_batches) {
    const std::uint64_t predicted = HfPeftPredictor{}.max_batch(m.shape, m.step, Budget(m.cap));
    CAPTURE(m.line);
    CAPTURE(m.model);
    CAPTURE(m.max_batch);
    CAPTURE(predicted);
    CHECK(predicted <= m.max_batch);
    CHECK(predicted + 1 >= m.max_batch);
  }
}

TEST_CASE("libtorch: measured reference steps of the Probe (H200, LibTorch 2.11)") {
  replay_steps(load("libtorch_steps.jsonl", "libtorch"), LibTorchPredictor{}, {0.965, 1.13}, 100);
}

namespace {
struct SimulatedTally {
  std::size_t checks = 0, exact = 0, under = 0;
  double lowest = 1e9, highest = 0;
};

// Every measured step whose kind has a recorded program, simulated, first step and steady state.
template <class Simulate>
SimulatedTally replay_simulated(const Measurements& data, Simulate simulate, double low, double high) {
  SimulatedTally t;
  for (const MeasuredStep& m : data.steps) {
    const auto r = simulate(m);
    if (!r) continue;
    for (PeakOver over : {PeakOver::first_step, PeakOver::steady}) {
      const Bytes predicted = over == PeakOver::first_step ? r->first : r->steady;
      const Bytes real = m.real(over);
      const double ratio = static_cast<double>(predicted.count()) / static_cast<double>(real.count());
      CAPTURE(m.line);
      CAPTURE(m.model);
      CAPTURE(to_string(over));
      CAPTURE(ratio);
      CHECK(ratio >= low);
      CHECK(ratio <= high);
      ++t.checks;
      t.exact += predicted == real ? 1 : 0;
      t.under += predicted < real ? 1 : 0;
      t.lowest = std::min(t.lowest, ratio);
      t.highest = std::max(t.highest, ratio);
    }
  }
  MESSAGE("simulated " << t.checks << " checks: " << t.exact << " exact to the byte, " << t.under
                       << " under; pred/real " << t.lowest << " .. " << t.highest);
  return t;
}
}  // namespace

// The exact path: every measured HF + PEFT step of a recorded kind (LoRA and full fine-tuning;
// vramfit/simulate.hpp), its recorded step program run through the allocator model, as the harness
// ran it (cache emptied after the build, on top of what the process held before the arm).
TEST_CASE("hf-peft: recorded step programs give the measured peaks of LoRA and full fine-tuning steps") {
  const SimulatedTally t = replay_simulated(
      load("hf_steps.jsonl", "hf-peft"),
      [](const MeasuredStep& m) -> std::optional<SimulatedPeak> {
        if (hf_peft_program_gap(m.shape, m.step) != nullptr) return std::nullopt;
        REQUIRE(m.baseline.has_value());
        return simulate_hf_peft(m.shape, m.step, max(*m.baseline, hf_peft_process_bytes(m.shape, m.step)),
                                m.cache_emptied_after_build);
      },
      0.9997, 1.003);
  CHECK(t.checks >= 352);  // 140 LoRA and 36 full fine-tuning steps, first and steady
  CHECK(t.exact >= 303);   // measured: 303 of 352
  CHECK(t.under <= 3);     // measured: 3, each by 1 MiB or less (arms that shared a process)
}

// The Probe's LibTorch steps (tests/data/libtorch_steps.jsonl, each in the Probe's flow: workspaces
// released and the cache emptied before the build), simulated from the libtorch programs.
TEST_CASE("libtorch: recorded step programs give the measured peaks of the Probe's steps") {
  const SimulatedTally t = replay_simulated(
      load("libtorch_steps.jsonl", "libtorch"),
      [](const MeasuredStep& m) { return simulate_libtorch(m.shape, m.step, m.baseline.value_or(Bytes{})); }, 1.0,
      1.002);
  CHECK(t.checks == 216);  // 108 steps, first and steady
  CHECK(t.exact >= 196);   // measured: 196 of 216
  // Two full fine-tuning steps (SmolLM2-135M 1 x 1024 with checkpointing, TinyLlama-1.1B 1 x 3000)
  // read under with segments placed in ascending or descending order (by 3.1 MB and 0.6 MB); the
  // driver's order meets them (tests/allocator_test.cpp).
  CHECK(t.under == 0);
}
