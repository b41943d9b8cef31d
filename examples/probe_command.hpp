#pragma once
/// @file probe_command.hpp
/// `vramfit probe`: runs real steps through the Probe on CUDA device 0 and prints the record's
/// table (seq, batch, predicted, real, pred/real, verdict, realised length), or JSON lines in the
/// schema of tests/data/*.jsonl (so a sweep can be committed and replayed on the CPU);
/// `vramfit probe --instruments` runs the instruments. Built only with VRAMFIT_WITH_PROBE.

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
#include <vramfit/json.hpp>
#include <vramfit/probe.hpp>
#include <vramfit/estimate.hpp>
#include <vramfit/vramfit.hpp>

#include "cli_options.hpp"

namespace vramfit::cli {

/// The reference step's knobs for a stack: the lean LibTorch step as it is, or the reference
/// step mirroring what HF transformers + PEFT keep (fp32-upcast RMSNorm, fp32 adapters that cast
/// their input per module, fp32 loss).
inline probe::ReferenceOptions reference_options(Stack stack) {
  probe::ReferenceOptions o;
  if (stack == Stack::hf_peft) {
    o.norm = probe::Norm::fp32_upcast;
    o.adapter_dtype = at::kFloat;
    o.loss_upcast = true;
  }
  return o;
}

namespace detail {

inline nlohmann::ordered_json phase_json(const probe::StepMeasurement& s) {
  return {{"weights", s.weights.count()},       {"peak", s.peak.count()},
          {"forward", s.forward_peak.count()},  {"backward", s.backward_peak.count()},
          {"optimizer", s.optimizer_peak.count()}, {"attention_backend", s.attention_backend}};
}

/// One checked step as a measurements row: the shape and the step's fields in the schema of
/// vramfit/json.hpp (what `vramfit::detail::load_measurements` reads), then the measurement.
inline std::string row_json(std::string_view model, std::string_view stack, const ModelShape& shape, const Step& step,
                            const probe::CheckResult& r, std::uint64_t repeat, const probe::StackRecord& record) {
  nlohmann::ordered_json j;
  j["kind"] = "step";
  j["stack_profile"] = stack;
  j["model"] = model;
  j["shape"] = shape;
  j.update(nlohmann::ordered_json(step));  // the step's fields at the top level, as the reader takes them
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
  j["baseline"] = r.baseline.count();
  j["phases"] = {{"step1", phase_json(r.step1)}, {"step2", phase_json(r.step2)}};
  j["stack"] = probe::to_json(record);
  return j.dump();
}

/// One step's allocator trace as a row of the form tests/validation/trace_capture.py writes.
inline std::string trace_json(std::string_view model, std::string_view stack, const ModelShape& shape,
                              const Step& step, const probe::CheckResult& r, const probe::AllocatorTrace& t) {
  nlohmann::ordered_json arm;
  arm["model"] = model;
  arm["arch"] = shape.qkv_bias ? "qwen2" : "llama";
  arm["shape"] = shape;
  arm.update(nlohmann::ordered_json(step));
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
  return j.dump();
}

inline int run_instruments(const CliOptions& o) {
  probe::PeakMeter meter(0);
  const probe::StackRecord record = probe::stack_record(0);
  std::puts(probe::to_json_line(record).c_str());
  const std::vector<std::uint64_t> vocabs = {8192, 32768, 49152, 128256, 151936};
  const std::uint64_t repeats = o.repeats < 3 ? 3 : o.repeats;
  for (const auto& row : probe::measure_loss_bytes(meter, vocabs, 4096, static_cast<int>(repeats)))
    std::puts(probe::to_json_line(row, record).c_str());
  std::fflush(stdout);
  for (const auto& row : probe::measure_sdpa_extra(meter, {1024, 2048, 3072, 4096, 6144, 8192}))
    std::puts(probe::to_json_line(row, record).c_str());
  return 0;
}

}  // namespace detail

/// `vramfit probe`. Exit 0 when every step ran (an under-prediction is reported, not an error),
/// 2 for bad input or no CUDA device.
inline int run_probe_command(const CliOptions& o) {
  if (o.instruments) return detail::run_instruments(o);
  const std::string name = o.config ? o.config->string() : *o.model;
  const ModelShape shape = o.config ? load_hf_config(*o.config) : preset(*o.model);
  const std::string_view stack = o.stack == Stack::libtorch ? profiles::LibTorch::name : profiles::HfPeft::name;
  probe::Probe probe(0, reference_options(o.stack));
  const probe::StackRecord record = probe::stack_record(0);
  if (!o.json)
    fmt::print("probe on {} ({} GB), torch {}, stack {} (reference step mirrors it)\nmodel: {}\n", record.gpu_name,
               fmt::format("{:.1f}", static_cast<double>(record.total_memory.count()) / 1e9), record.torch_version,
               stack, describe(shape));
  std::vector<SweepRow> rows;
  std::ofstream trace_file;
  if (o.trace_out) {
    trace_file.open(*o.trace_out, std::ios::app);
    if (!trace_file) throw InvalidInput("--trace-out", "cannot write " + o.trace_out->string());
    nlohmann::ordered_json stack_line = {{"kind", "stack"}};
    const nlohmann::json record_json = probe::to_json(record);  // alive through the loop
    for (const auto& [key, value] : record_json.items()) stack_line[key] = value;
    trace_file << stack_line.dump() << '\n';
  }
  for (std::uint64_t seq : o.seqs)
    for (std::uint64_t batch : o.batches)
      for (std::uint64_t k = 0; k < o.repeats; ++k) {
        const Step step = o.step(batch, seq);
        // As `vramfit predict` does (`vramfit::estimate`). The libtorch programs are the Probe's own
        // flow; the hf-peft ones are HF's process, not the reference step's, so the hf-peft mirror
        // is checked against the closed form.
        const vramfit::Estimate e = vramfit::estimate(shape, step, o.stack);
        const Bytes predicted = o.stack == Stack::libtorch ? e.peak : e.closed_form.peak;
        std::optional<probe::AllocatorTraceRecorder> recorder;
        if (o.trace_out) recorder.emplace(0);
        const probe::CheckResult r = probe.measure(shape, step, predicted, recorder ? &*recorder : nullptr);
        if (recorder) {
          recorder->stop();
          if (!r.out_of_memory() && recorder->trace().events.empty())
            throw std::runtime_error("--trace-out: the allocator reported no requests during the step");
          if (!r.out_of_memory()) trace_file << detail::trace_json(name, stack, shape, step, r, recorder->trace()) << '\n';
          trace_file.flush();
        }
        if (o.json) {
          std::puts(detail::row_json(name, stack, shape, step, r, k, record).c_str());
          std::fflush(stdout);
        } else {
          std::fprintf(stderr, "  seq %llu batch %llu: %s\n", static_cast<unsigned long long>(seq),
                       static_cast<unsigned long long>(batch), r.verdict.c_str());
          SweepRow row{.batch = batch, .seq = seq, .predicted = predicted};
          if (!r.out_of_memory()) {
            row.real = r.real;
            row.realised_seq = r.realised_seq;
          }
          rows.push_back(row);
        }
      }
  if (!o.json) fmt::print("{}", sweep_table(rows));
  return 0;
}

}  // namespace vramfit::cli
