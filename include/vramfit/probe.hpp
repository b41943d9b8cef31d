#pragma once
/// @file probe.hpp
/// The Probe: runs the reference training step on a CUDA GPU and checks a prediction against the
/// caching allocator's own peak. Links LibTorch (target `vramfit::probe`); never included by
/// `vramfit.hpp`.
///
///     #include <vramfit/probe.hpp>
///     vramfit::Probe probe;                       // device 0, the lean `libtorch` stack
///     auto r = probe.check(predictor, vramfit::preset("SmolLM2-135M"), step);
///     std::puts(vramfit::probe::to_json_line(r, model, step, probe.options(), probe.stack()).c_str());

#include <cctype>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"
#include "vramfit/json.hpp"
#include "vramfit/model.hpp"
#include "vramfit/probe/instruments.hpp"
#include "vramfit/probe/meter.hpp"
#include "vramfit/probe/reference_step.hpp"
#include "vramfit/probe/trace.hpp"
#include "vramfit/step.hpp"

namespace vramfit::probe {

inline constexpr std::string_view verdict_safe = "over-predicts: safe";
inline constexpr std::string_view verdict_unsafe = "UNDER-PREDICTS: unsafe";
inline constexpr std::string_view verdict_oom = "does not fit: OOM";

/// A prediction against the real step. Byte figures other than `step1`/`step2` are relative to
/// `baseline` (what was allocated before the model was built), so a check reads the same in a
/// process that holds other tensors as in a fresh one.
struct CheckResult {
  Bytes predicted;    ///< the predictor's `peak`
  Bytes real;         ///< `real_first` or `real_steady`, as the step's `peak_over` asks
  Bytes real_first;   ///< peak of step 1 over the baseline
  Bytes real_steady;  ///< larger of the peaks of steps 1 and 2 over the baseline
  double ratio = std::numeric_limits<double>::quiet_NaN();  ///< predicted / real; NaN after an OOM
  std::string verdict;  ///< `verdict_safe` (ratio >= 1), `verdict_unsafe`, or `verdict_oom`
  std::uint64_t realised_seq = 0;
  StepMeasurement step1;  ///< absolute allocator figures
  StepMeasurement step2;
  Bytes baseline;
  std::optional<Bytes> oom_requested;  ///< the allocation that failed, as the OOM message prints it
  std::string oom_message;             ///< the OOM message's first line; empty when the step ran
  Bytes build_allocated_peak;  ///< absolute peaks while the model, ids and optimizer were built
  Bytes build_reserved_peak;
  /// The largest reserved bytes from the build to the end of step 2 (to the OOM, after one): what a
  /// memory limit (`MemoryFraction`) is checked against.
  Bytes reserved_peak;

  [[nodiscard]] bool out_of_memory() const { return verdict == verdict_oom; }
};

namespace detail {
/// The size in "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has ..." (the allocator
/// prints two decimals of bytes, KiB, MiB or GiB); empty if the message has no such size.
inline std::optional<Bytes> requested_bytes(std::string_view message) {
  constexpr std::string_view marker = "Tried to allocate ";
  const auto found = message.find(marker);
  if (found == std::string_view::npos) return std::nullopt;
  const std::string_view rest = message.substr(found + marker.size());
  std::size_t i = 0;
  while (i < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[i])) || rest[i] == '.')) ++i;
  const std::string_view number = rest.substr(0, i);
  while (i < rest.size() && rest[i] == ' ') ++i;
  std::size_t j = i;
  while (j < rest.size() && std::isalpha(static_cast<unsigned char>(rest[j]))) ++j;
  std::string unit(rest.substr(i, j - i));
  if (unit == "bytes") unit = "B";
  try {
    return parse_size(std::string(number) + " " + unit, "OOM message");
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}
}  // namespace detail

/**
 * Checks predictions against the reference step on one CUDA device.
 *
 * `check` validates the shape and step, asks the predictor, records the allocated baseline, builds
 * the model, runs step 1 and step 2 (each measured by phase), and compares. After it returns,
 * allocated memory is back at the baseline: the model, its optimizer and every tensor are gone,
 * the cuBLAS workspaces released and the cache emptied.
 */
class Probe {
public:
  /// Throws `InvalidInput` ("device") when there is no such CUDA device.
  explicit Probe(int device = 0, ReferenceOptions options = {}) : meter_(device), options_(options) {}

  /**
   * @tparam Predictor has `predict(const ModelShape&, const Step&)` returning an object with a
   *         member `peak` convertible to `vramfit::Bytes`.
   */
  template <class Predictor>
  CheckResult check(const Predictor& predictor, const ModelShape& model, const Step& step) {
    validate(model);
    validate(step, model);
    const auto prediction = predictor.predict(model, step);
    return measure(model, step, Bytes(prediction.peak));
  }

  /// The real step against an already computed prediction. With `recorder` (started before this
  /// call), the reference step marks its phases and layers in the recorder's trace, "end" after
  /// the second step, and the recording stops there.
  CheckResult measure(const ModelShape& model, const Step& step, Bytes predicted,
                      AllocatorTraceRecorder* recorder = nullptr) {
    CheckResult r;
    r.predicted = predicted;
    // A fresh process has no cuBLAS workspace and nothing cached: start like one.
    meter_.release_blas_workspaces();
    meter_.empty_cache();
    r.baseline = meter_.allocated();
    bool oom = false;
    {
      // Leaves the allocator as the check found it, on every way out (an error other than an OOM
      // propagates, after this).
      struct Settle {
        PeakMeter& meter;
        ~Settle() {
          try {
            meter.release_blas_workspaces();
            meter.empty_cache();
          } catch (...) {  // a destructor must not throw; a broken device shows in the next call
          }
        }
      } settle{meter_};
      try {
        meter_.reset();
        ReferenceModel reference(model, step, options_, meter_.device());
        meter_.synchronize();
        r.build_allocated_peak = meter_.peak_allocated();
        r.build_reserved_peak = meter_.peak_reserved();
        r.reserved_peak = r.build_reserved_peak;
        if (recorder != nullptr) reference.set_marker([recorder](const std::string& label) { recorder->mark(label); });
        r.realised_seq = reference.realised_seq();
        r.step1 = reference.measure_step(meter_);
        r.step2 = reference.measure_step(meter_);
        r.reserved_peak = max(r.reserved_peak, max(r.step1.reserved_peak, r.step2.reserved_peak));
        if (recorder != nullptr) {
          recorder->mark("end");
          recorder->stop();
        }
      } catch (const c10::OutOfMemoryError& e) {  // the model and every tensor are already unwound
        oom = true;
        r.oom_requested = detail::requested_bytes(e.what());
        const std::string_view what = e.what();
        r.oom_message = std::string(what.substr(0, what.find('\n')));
        r.reserved_peak = max(r.reserved_peak, meter_.peak_reserved());
      }
    }
    if (oom) {
      r.verdict = verdict_oom;
      return r;
    }
    auto over_baseline = [&](Bytes b) { return b < r.baseline ? Bytes{} : b - r.baseline; };
    r.real_first = over_baseline(r.step1.peak);
    r.real_steady = over_baseline(max(r.step1.peak, r.step2.peak));
    r.real = step.peak_over == PeakOver::first_step ? r.real_first : r.real_steady;
    r.ratio = r.real.count() == 0 ? std::numeric_limits<double>::infinity()
                                  : static_cast<double>(r.predicted.count()) / static_cast<double>(r.real.count());
    r.verdict = r.ratio >= 1.0 ? verdict_safe : verdict_unsafe;
    return r;
  }

  [[nodiscard]] int device() const { return meter_.device(); }
  [[nodiscard]] const ReferenceOptions& options() const { return options_; }
  [[nodiscard]] PeakMeter& meter() { return meter_; }
  /// The stack of this probe's device.
  [[nodiscard]] StackRecord stack() const { return stack_record(meter_.device()); }

private:
  PeakMeter meter_;
  ReferenceOptions options_;
};

// ---- JSON -----------------------------------------------------------------------------------------

inline nlohmann::json to_json(const ReferenceOptions& o, const Step& s) {
  return {{"norm", std::string(to_string(o.norm))},
          {"adapter_dtype", dtype_name(o.adapter_dtype.value_or(scalar_type(s.precision)))},
          {"loss_upcast", o.loss_upcast},
          {"lora_alpha", o.lora_alpha.value_or(2.0 * static_cast<double>(s.lora.rank))}};
}

inline nlohmann::json to_json(const StepMeasurement& m) {
  return {{"weights", m.weights.count()},
          {"peak", m.peak.count()},
          {"forward_peak", m.forward_peak.count()},
          {"backward_peak", m.backward_peak.count()},
          {"optimizer_peak", m.optimizer_peak.count()},
          {"reserved_peak", m.reserved_peak.count()},
          {"realised_seq", m.realised_seq},
          {"attention_backend", m.attention_backend}};
}

/// One line of JSON for a check: the model, the step, the stack options, the verdict and both
/// steps' figures, and the stack record. NaN ratios (OOM) are written as null.
inline std::string to_json_line(const CheckResult& r, const ModelShape& model, const Step& step,
                                const ReferenceOptions& options, const StackRecord& stack) {
  nlohmann::json j;
  j["model"] = model;  // the schema of json.hpp
  j["step"] = step;
  j["options"] = probe::to_json(options, step);
  j["predicted"] = r.predicted.count();
  j["real"] = r.real.count();
  j["real_first"] = r.real_first.count();
  j["real_steady"] = r.real_steady.count();
  j["ratio"] = r.ratio == r.ratio ? nlohmann::json(r.ratio) : nlohmann::json(nullptr);
  j["verdict"] = r.verdict;
  j["realised_seq"] = r.realised_seq;
  j["baseline"] = r.baseline.count();
  j["step1"] = probe::to_json(r.step1);
  j["step2"] = probe::to_json(r.step2);
  j["oom_requested"] = r.oom_requested ? nlohmann::json(r.oom_requested->count()) : nlohmann::json(nullptr);
  j["stack"] = probe::to_json(stack);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vramfit::probe

namespace vramfit {
using probe::Probe;
}  // namespace vramfit
