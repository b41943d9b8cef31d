#pragma once
/// @file simulate.hpp
/// The exact path: a step's peak from its recorded step program (vramfit/step_program.hpp) run
/// through the caching-allocator model, for the kinds of step that were recorded, on HF
/// transformers + PEFT (vramfit/programs/hf_peft.hpp) and on the Probe's LibTorch step
/// (vramfit/programs/libtorch.hpp). Where no program applies, `hf_peft_program_gap` and
/// `libtorch_program_gap` say why and the closed-form terms are the prediction.
///
/// A program run takes milliseconds (every request of the build and two steps, one layer after
/// another, once per address order), the closed form nanoseconds: search loops use the closed
/// form, and a simulated prediction is the one to report.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "vramfit/bytes.hpp"
#include "vramfit/model.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/programs/hf_peft.hpp"
#include "vramfit/programs/libtorch.hpp"
#include "vramfit/step.hpp"
#include "vramfit/step_program.hpp"

namespace vramfit {

/// A simulated peak: the allocator's peak of allocated bytes, weights and workspaces included.
struct SimulatedPeak {
  Bytes peak;                 ///< over the phase the step asks for (`Step::peak_over`)
  Bytes first;                ///< over the first step
  Bytes steady;               ///< over the first and second steps
  Bytes after_build;          ///< allocated once the model and adapters are built
  std::string_view phase;     ///< where `peak` falls: forward, backward, optimizer, zero_grad
  std::size_t requests = 0;   ///< allocator requests replayed
};

namespace detail {
inline std::string_view lora_targets_key(const Step& s) {
  if (s.mode != Mode::lora) return "";
  if (s.lora.targets == TargetSet::attention()) return "q_proj,k_proj,v_proj,o_proj";
  if (s.lora.targets == TargetSet::peft_default()) return "q_proj,v_proj";
  if (s.lora.targets == TargetSet::all_linear()) return "all-linear";
  return "?";
}

// The recorded entry of the step's kind among `entries` (either stack's table), or nullptr and why.
template <class Entry, std::size_t N>
const Entry* find_entry(const Entry (&entries)[N], const ModelShape& m, const Step& s, const char** why) {
  const auto fail = [&](const char* w) -> const Entry* {
    if (why) *why = w;
    return nullptr;
  };
  if (!s.single_gpu()) return fail("recorded on one GPU only");
  if (s.precision != Precision::bf16) return fail("recorded in bf16 only");
  if (s.attention != Attention::flash) return fail("recorded with SDPA's default fused kernel only");
  if (!m.gated_mlp) return fail("recorded for gated (SwiGLU) MLPs only");
  // Checked at seq 416 to 8192 and batch 1 to 7: outside a margin of that, SDPA may pick another
  // kernel (with other workspaces) and the programs are not used.
  if (s.seq < 256 || s.seq > 16384 || s.batch > 16)
    return fail("outside the range the programs are used in (seq 256 to 16384, batch up to 16)");
  const std::uint64_t hd = m.head_dimension();
  const unsigned hd_bit = hd == 64 ? 1u : hd == 128 ? 2u : 0u;
  if (hd_bit == 0) return fail("recorded at head_dim 64 and 128 only");
  const std::string_view arch = m.qkv_bias ? "qwen2" : "llama";
  const std::string_view mode = s.mode == Mode::lora ? "lora" : "full";
  const std::string_view targets = lora_targets_key(s);
  if (targets == "?") return fail("LoRA targets recorded: q_proj,v_proj; q_proj,k_proj,v_proj,o_proj; all-linear");
  for (const auto& e : entries) {
    if (e.arch == arch && e.tied == m.tied_embeddings && e.mode == mode && e.targets == targets &&
        e.checkpointing == s.gradient_checkpointing && e.logits_retained == s.logits_retained) {
      if ((e.head_dims & hd_bit) == 0) return fail("this kind of step was not checked at this head_dim");
      if (why) *why = nullptr;
      return &e;
    }
  }
  return fail("this kind of step (architecture, head, mode, checkpointing, kept logits) was not recorded");
}

template <class Entry, std::size_t N>
const StepProgram& parsed(const Entry (&entries)[N], const Entry& e) {
  static const std::vector<StepProgram> all = [&] {
    std::vector<StepProgram> v;
    for (const auto& x : entries) v.emplace_back(x.program);
    return v;
  }();
  return all[static_cast<std::size_t>(&e - entries)];
}

inline ProgramDims program_dims(const ModelShape& m, const Step& s) {
  return ProgramDims{.batch = s.batch, .seq = s.seq, .hidden = m.hidden, .intermediate = m.intermediate,
                     .heads = m.heads, .kv_heads = m.kv_heads, .head_dim = m.head_dimension(), .vocab = m.vocab,
                     .rank = s.mode == Mode::lora ? s.lora.rank : 0};
}

// Runs `program` under every segment placement the simulation considers (CachingAllocatorModel::
// AddressOrder): ascending, descending, the driver's at each of its headrooms and the scattered
// ones; keeps the largest peak of each kind, with the phase of the placement that gives it.
inline SimulatedPeak simulate_placements(const StepProgram& program, const ModelShape& m, const Step& s, Bytes held,
                                         bool empty_cache_after_build) {
  using Order = CachingAllocatorModel::AddressOrder;
  const ProgramDims d = program_dims(m, s);
  const bool first = s.peak_over == PeakOver::first_step;
  SimulatedPeak out;
  const auto keep = [&](const ProgramPeaks& p) {
    out.first = max(out.first, p.first);
    out.steady = max(out.steady, p.steady);
    out.after_build = max(out.after_build, p.after_build);
    const Bytes peak = first ? p.first : p.steady;
    if (out.phase.empty() || peak > out.peak) {  // the first placement run, or a larger peak
      out.peak = peak;
      out.phase = StepProgram::phase_name(first ? p.first_phase : p.steady_phase);
      out.requests = p.requests;
    }
  };
  keep(program.run(d, m.layers, held, empty_cache_after_build, Order::ascending));
  keep(program.run(d, m.layers, held, empty_cache_after_build, Order::descending));
  for (std::uint64_t h = 0; h <= CachingAllocatorModel::kDriverHeadroomMax;
       h += CachingAllocatorModel::kDriverHeadroomStep)
    keep(program.run(d, m.layers, held, empty_cache_after_build, Order::driver, h));
  for (std::uint64_t seed = 1; seed <= CachingAllocatorModel::kScatteredPlacements; ++seed)
    keep(program.run(d, m.layers, held, empty_cache_after_build, Order::scattered, seed));
  return out;
}
}  // namespace detail

/// Why no recorded HF + PEFT program applies to this model and step, or nullptr when one does.
inline const char* hf_peft_program_gap(const ModelShape& m, const Step& s) {
  const char* why = nullptr;
  (void)detail::find_entry(programs::hf_peft::entries, m, s, &why);
  return why;
}

/// Why no recorded program of the Probe's LibTorch step applies, or nullptr when one does.
inline const char* libtorch_program_gap(const ModelShape& m, const Step& s) {
  const char* why = nullptr;
  (void)detail::find_entry(programs::libtorch::entries, m, s, &why);
  return why;
}

/// Bytes a process holds outside the step program: the cuBLAS workspaces (measured 65 MiB), and
/// with q/k/v bias and checkpointing 1 MiB more, the cuBLASLt workspace the autograd thread takes
/// when the recomputed forward's biased projections first run there (recorded: it appears in the
/// first such step of a process and stays).
inline Bytes hf_peft_process_bytes(const ModelShape& m, const Step& s) {
  return Bytes(profiles::HfPeft::workspace_bytes + (m.qkv_bias && s.gradient_checkpointing ? (1ULL << 20) : 0));
}

/// The peak of an HF + PEFT run (build, then steps) simulated from its recorded program, if one
/// applies. `baseline`: bytes allocated outside the program (default `hf_peft_process_bytes`).
/// `empty_cache_after_build`: whether the cache is emptied between the build and the first step.
inline std::optional<SimulatedPeak> simulate_hf_peft(const ModelShape& m, const Step& s,
                                                     std::optional<Bytes> baseline = std::nullopt,
                                                     bool empty_cache_after_build = false) {
  validate(m);
  const auto* e = detail::find_entry(programs::hf_peft::entries, m, s, nullptr);
  if (e == nullptr) return std::nullopt;
  return detail::simulate_placements(detail::parsed(programs::hf_peft::entries, *e), m, s,
                                     baseline ? *baseline : hf_peft_process_bytes(m, s), empty_cache_after_build);
}

/// The peak of the Probe's LibTorch step (`vramfit/probe.hpp`: build, then two steps, in a process
/// whose cuBLAS workspaces were released, so the program creates them), simulated from its recorded
/// program, if one applies. `baseline`: bytes allocated before the build (the probe's: none).
inline std::optional<SimulatedPeak> simulate_libtorch(const ModelShape& m, const Step& s, Bytes baseline = Bytes{}) {
  validate(m);
  const auto* e = detail::find_entry(programs::libtorch::entries, m, s, nullptr);
  if (e == nullptr) return std::nullopt;
  return detail::simulate_placements(detail::parsed(programs::libtorch::entries, *e), m, s, baseline, false);
}

}  // namespace vramfit
