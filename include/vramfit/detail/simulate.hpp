#pragma once
/// @file detail/simulate.hpp
/// The exact path behind `vramfit::estimate`: a step's recorded step program (detail/step_program.hpp)
/// run through the caching-allocator model at every segment placement considered, for the kinds of
/// step that were recorded (detail/programs/*.hpp). Why placements matter: tests/validation/README.md.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "vramfit/bytes.hpp"
#include "vramfit/model.hpp"
#include "vramfit/step.hpp"
#include "vramfit/detail/allocator.hpp"
#include "vramfit/detail/step_program.hpp"

namespace vramfit::detail {

/// The largest figures over the placements simulated.
struct PlacementPeaks {
  Bytes peak;               ///< over the steps the step asks for (`Step::peak_over`)
  Bytes first, steady;      ///< over the first step; over the first and second steps
  Bytes after_build;        ///< allocated once the model and adapters are built
  Bytes reserved;           ///< the segments held at the end of the run, without a budget
  std::string_view phase;   ///< where `peak` falls: forward, backward, optimizer, zero_grad
  std::size_t requests = 0; ///< allocator requests replayed
};

inline std::string_view lora_targets_key(const Step& s) {
  if (s.mode != Mode::lora) return "";
  if (s.lora.targets == TargetSet::attention()) return "q_proj,k_proj,v_proj,o_proj";
  if (s.lora.targets == TargetSet::peft_default()) return "q_proj,v_proj";
  if (s.lora.targets == TargetSet::all_linear()) return "all-linear";
  return "?";
}

/// The recorded entry of the step's kind among `entries` (a stack's table), or nullptr and why.
template <class Entry, std::size_t N>
const Entry* find_entry(const Entry (&entries)[N], const ModelShape& m, const Step& s, std::string_view& why) {
  const auto fail = [&](std::string_view w) -> const Entry* {
    why = w;
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
  // Each program gives back the 4-layer trace of its kind; below that some would free a request
  // their first layers never made (they throw), so the closed form answers.
  if (m.layers < 4) return fail("recorded for 4 layers and more only");
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
      why = {};
      return &e;
    }
  }
  return fail("this kind of step (architecture, head, mode, checkpointing, kept logits) was not recorded");
}

/// The parsed program of `e`, parsed once per table.
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

/// Runs `program` under every segment placement the simulation considers (`CachingAllocatorModel::
/// AddressOrder`): ascending, descending, the driver's at each of its headrooms and the scattered
/// ones; keeps the largest figure of each kind, with the phase of the placement that gives the peak.
/// `held`: bytes the process holds outside the program (in segments of their own).
inline PlacementPeaks simulate_placements(const StepProgram& program, const ModelShape& m, const Step& s, Bytes held,
                                          bool empty_cache_after_build) {
  using Order = CachingAllocatorModel::AddressOrder;
  const ProgramDims d = program_dims(m, s);
  const bool first = s.peak_over == PeakOver::first_step;
  PlacementPeaks out;
  const auto keep = [&](const ProgramPeaks& p) {
    out.first = max(out.first, p.first);
    out.steady = max(out.steady, p.steady);
    out.after_build = max(out.after_build, p.after_build);
    out.reserved = max(out.reserved, p.reserved);
    const Bytes peak = first ? p.first : p.steady;
    if (out.phase.empty() || peak > out.peak) {  // the first placement run, or a larger peak
      out.peak = peak;
      out.phase = enum_name(first ? p.first_phase : p.steady_phase);
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
  // What the process holds outside the program sits in segments of its own, rounded up to the
  // 2 MiB the allocator rounds large segments to (the cuBLAS workspaces: 64 or 65 MiB).
  out.reserved = out.reserved + Bytes(checked_add(held.count(), (2ULL << 20) - 1) / (2ULL << 20) * (2ULL << 20));
  return out;
}

}  // namespace vramfit::detail
