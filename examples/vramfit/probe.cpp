// `vramfit probe`: runs real steps through the Probe on CUDA device 0 and prints the record's
// table (seq, batch, predicted, real, pred/real, verdict, realised length), or JSON lines in the
// schema of tests/data/*.jsonl (so a sweep can be committed and replayed on the CPU);
// `vramfit probe --instruments` runs the instruments. Built only with VRAMFIT_WITH_PROBE (LibTorch).

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <vramfit/config_json.hpp>
#include <vramfit/estimate.hpp>
#include <vramfit/json.hpp>
#include <vramfit/probe.hpp>
#include <vramfit/vramfit.hpp>

#include "common.hpp"

namespace vramfit::cli {
namespace {

/// The reference step's knobs for a stack: the lean LibTorch step as it is, or the reference
/// step mirroring what HF transformers + PEFT keep (fp32-upcast RMSNorm, fp32 adapters that cast
/// their input per module, fp32 loss).
probe::ReferenceOptions reference_options(Stack stack) {
  probe::ReferenceOptions o;
  if (stack == Stack::hf_peft) {
    o.norm = probe::Norm::fp32_upcast;
    o.adapter_dtype = at::kFloat;
    o.loss_upcast = true;
  }
  return o;
}

/// The model's shape and the step's fields at the top level, in the schema of vramfit/json.hpp
/// (what `vramfit::detail::load_measurements` reads).
void add_step_fields(nlohmann::ordered_json& j, const ModelShape& shape, const Step& step) {
  j["shape"] = shape;
  j.update(nlohmann::ordered_json(step));
}

nlohmann::ordered_json phase_json(const probe::StepMeasurement& s) {
  return {{"weights", s.weights.count()},       {"peak", s.peak.count()},
          {"forward", s.forward_peak.count()},  {"backward", s.backward_peak.count()},
          {"optimizer", s.optimizer_peak.count()}, {"reserved", s.reserved_peak.count()},
          {"attention_backend", s.attention_backend}};
}

/// One checked step as a measurements row (the schema `vramfit::detail::load_measurements` reads).
nlohmann::ordered_json row_json(std::string_view model, std::string_view stack, const ModelShape& shape, const Step& step,
                     const probe::CheckResult& r, std::uint64_t repeat, const probe::StackRecord& record) {
  nlohmann::ordered_json j;
  j["kind"] = "step";
  j["stack_profile"] = stack;
  j["model"] = model;
  add_step_fields(j, shape, step);
  j["repeat"] = repeat;
  j["realised_seq"] = r.realised_seq;
  j["predicted"] = r.predicted.count();
  if (r.out_of_memory()) {
    j["error"] = "OOM: " + (r.oom_requested ? fmt::format("tried to allocate {} bytes", r.oom_requested->count())
                                            : std::string("size unknown"));
  } else {
    j["error"] = nullptr;
    j["peak_first"] = r.real_first.count();
    j["peak_steady"] = r.real_steady.count();
    j["ratio"] = r.ratio;
  }
  j["verdict"] = r.verdict;
  j["outcome"] = r.out_of_memory() ? "oom" : "ok";
  j["oom_message"] = r.oom_message.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.oom_message);
  j["build_allocated_peak"] = r.build_allocated_peak.count();
  j["build_reserved_peak"] = r.build_reserved_peak.count();
  j["reserved_peak"] = r.reserved_peak.count();
  j["baseline"] = r.baseline.count();
  j["phases"] = {{"step1", phase_json(r.step1)}, {"step2", phase_json(r.step2)}};
  j["stack"] = probe::to_json(record);
  return j;
}

/// One step's allocator trace as a row of the form tests/validation/trace_capture.py writes.
std::string trace_json(std::string_view model, std::string_view stack, const ModelShape& shape, const Step& step,
                       const probe::CheckResult& r, const probe::AllocatorTrace& t) {
  nlohmann::ordered_json arm;
  arm["model"] = model;
  arm["arch"] = shape.qkv_bias ? "qwen2" : "llama";
  add_step_fields(arm, shape, step);
  nlohmann::ordered_json j;
  j["kind"] = "trace";
  j["stack_profile"] = stack;
  j["arm"] = arm;
  j["baseline"] = r.baseline.count();
  j["phases"] = {{"step1", phase_json(r.step1)}, {"step2", phase_json(r.step2)}};
  j["peak_allocated"] = max(r.step1.peak, r.step2.peak).count();
  j["events"] = t.events;
  nlohmann::ordered_json marks = nlohmann::ordered_json::array();
  for (const auto& [pos, label] : t.marks) marks.push_back({pos, label});
  j["marks"] = marks;
  j["addresses"] = t.addresses;
  j["segments"] = t.segments;
  return json_text(j);
}

class ProbeCommand final : public ModelCommand {
public:
  ProbeCommand(CLI::App& parent, BadValues& bad)
      : ModelCommand(add_command(parent, "probe", std::string(probe_usage), std::string(probe_summary),
                                 "0 success, 2 bad input, 3 with --budget: a step does not fit"),
                     bad, {.lists = true, .ranks = false, .fit = false}) {
    add_switch(*app_, "--instruments", instruments_,
               "measure instead of checking steps: bytes per logits element of the loss (bf16 and fp32-upcast) "
               "across vocabularies, the extra memory of each SDPA backend and of the default, the stack record");
    add_value(*app_, bad, "--trace-out", "FILE",
              "also record each step's allocator trace (every request and free of the build and two steps, with "
              "phase and layer marks) and write it to FILE as JSON lines, for tests/validation/trace_program.py",
              [this](std::string_view v) { trace_out_ = std::filesystem::path(v); });
    add_value(*app_, bad, "--repeats", "N", "run each step N times, 1 to 100, to show the spread (default 1)",
              [this](std::string_view v) {
                repeats_ = parse_positive("--repeats", v);
                if (repeats_ > 100) throw InvalidInput("--repeats", "must be at most 100, got " + std::string(v));
              });
    add_switch(*app_, "--json", json_, "print JSON lines instead of text: one object per line, a line per step");
  }

  void check() const override {
    if (trace_out_ && instruments_) throw InvalidInput("--trace-out", "records checked steps, not --instruments");
    flags_.check(!instruments_);
    if (flags_.stack == Stack::hf_trainer)
      throw InvalidInput("--stack", "the Probe runs its LibTorch reference step, not the Trainer's (give hf-peft or "
                                    "libtorch; trainer_harness.py measures the Trainer)");
    // The reference step (probe/reference_step.hpp) runs AdamW without dropout, on either stack.
    if (flags_.step.lora_dropout())
      throw InvalidInput("--lora-dropout", "the Probe's reference step runs no dropout (vramfit-record measures "
                                           "your own step with dropout)");
    if (flags_.step.optimizer != Optimizer::adamw)
      throw InvalidInput("--optim", "the Probe's reference step runs AdamW only (vramfit-record measures your own "
                                    "step with SGD)");
  }

  /// Exit 0 when every step ran (an under-prediction is reported, not an error), 2 for bad input
  /// or no CUDA device.
  int run(std::FILE* out, std::FILE* err) const override {
    if (instruments_) return run_instruments(out);
    const NamedModel model = flags_.resolve();
    const std::string& name = model.name;
    const ModelShape& shape = model.shape;
    if (shape.qk_norm)
      throw InvalidInput(model.from_config ? "--config" : "--model",
                         "the Probe's reference step has no q/k norms (Qwen3); vramfit predict estimates it");
    const std::string_view stack = flags_.stack == Stack::libtorch ? profiles::LibTorch::name : profiles::HfPeft::name;
    probe::Probe probe(0, reference_options(flags_.stack));
    const probe::StackRecord record = probe::stack_record(0);
    if (!json_)
      fmt::print(out, "probe on {} ({} GB), torch {}, stack {} (reference step mirrors it)\nmodel: {}\n",
                 record.gpu_name, fmt::format("{:.1f}", static_cast<double>(record.total_memory.count()) / 1e9),
                 record.torch_version, stack, describe(shape));
    // --budget: the caching allocator may reserve at most that much, as
    // torch.cuda.set_per_process_memory_fraction(budget / total) caps it; a step past it is an OOM.
    std::optional<probe::MemoryFraction> cap;
    if (flags_.budget) {
      const double fraction = probe::MemoryFraction::for_bytes(0, *flags_.budget);
      cap.emplace(0, fraction);
      if (!json_) fmt::print(out, "memory fraction {:.6f}: the allocator may reserve {}\n", fraction, budget_text(*flags_.budget));
    }
    bool any_oom = false;
    std::vector<SweepRow> rows;
    std::ofstream trace_file;
    if (trace_out_) {
      trace_file.open(*trace_out_, std::ios::app);
      if (!trace_file) throw InvalidInput("--trace-out", "cannot write " + trace_out_->string());
      nlohmann::ordered_json stack_line = {{"kind", "stack"}};
      const nlohmann::json record_json = probe::to_json(record);  // alive through the loop
      for (const auto& [key, value] : record_json.items()) stack_line[key] = value;
      trace_file << json_text(stack_line) << '\n';
    }
    for (std::uint64_t seq : flags_.seqs)
      for (std::uint64_t batch : flags_.batches)
        for (std::uint64_t k = 0; k < repeats_; ++k) {
          const Step step = model.at(batch, seq);
          // As `vramfit predict` does (`vramfit::estimate`). The libtorch programs are the Probe's own
          // flow; the hf-peft ones are HF's process, not the reference step's, so the hf-peft mirror
          // is checked against the closed form.
          const Estimate e = estimate(shape, step, flags_.stack);
          const Bytes predicted = flags_.stack == Stack::libtorch ? e.peak : e.closed_form.peak;
          std::optional<probe::AllocatorTraceRecorder> recorder;
          if (trace_out_) recorder.emplace(0);
          const probe::CheckResult r = probe.measure(shape, step, predicted, recorder ? &*recorder : nullptr);
          any_oom = any_oom || r.out_of_memory();
          if (recorder) {
            recorder->stop();
            if (!r.out_of_memory() && recorder->trace().events.empty())
              throw std::runtime_error("--trace-out: the allocator reported no requests during the step");
            if (!r.out_of_memory()) trace_file << trace_json(name, stack, shape, step, r, recorder->trace()) << '\n';
            trace_file.flush();
          }
          if (json_) {
            nlohmann::ordered_json row = row_json(name, stack, shape, step, r, k, record);
            if (cap) {
              row["budget_bytes"] = flags_.budget->count();
              row["fraction"] = probe::MemoryFraction::for_bytes(0, *flags_.budget);
            }
            std::fprintf(out, "%s\n", json_text(row).c_str());
            std::fflush(out);
          } else {
            std::fprintf(err, "  seq %llu batch %llu: %s\n", static_cast<unsigned long long>(seq),
                         static_cast<unsigned long long>(batch), r.verdict.c_str());
            SweepRow row{.batch = batch, .seq = seq, .predicted = predicted};
            if (!r.out_of_memory()) {
              row.real = r.real;
              row.realised_seq = r.realised_seq;
            }
            rows.push_back(row);
          }
        }
    if (!json_) fmt::print(out, "{}", sweep_table(rows));
    return cap && any_oom ? exit_does_not_fit : exit_success;
  }

private:
  int run_instruments(std::FILE* out) const {
    probe::PeakMeter meter(0);
    const probe::StackRecord record = probe::stack_record(0);
    std::fprintf(out, "%s\n", probe::to_json_line(record).c_str());
    const std::vector<std::uint64_t> vocabs = {8192, 32768, 49152, 128256, 151936};
    const std::uint64_t repeats = repeats_ < 3 ? 3 : repeats_;
    for (const auto& row : probe::measure_loss_bytes(meter, vocabs, 4096, static_cast<int>(repeats)))
      std::fprintf(out, "%s\n", probe::to_json_line(row, record).c_str());
    std::fflush(out);
    for (const auto& row : probe::measure_sdpa_extra(meter, {1024, 2048, 3072, 4096, 6144, 8192}))
      std::fprintf(out, "%s\n", probe::to_json_line(row, record).c_str());
    return exit_success;
  }

  bool instruments_ = false;                        ///< --instruments
  std::optional<std::filesystem::path> trace_out_;  ///< --trace-out: where to write step traces
  std::uint64_t repeats_ = 1;                       ///< --repeats: runs of each step
};

}  // namespace

std::unique_ptr<Command> add_probe(CLI::App& app, BadValues& bad) { return std::make_unique<ProbeCommand>(app, bad); }

}  // namespace vramfit::cli
