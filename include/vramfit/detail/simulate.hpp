#pragma once
/// @file detail/simulate.hpp
/// The exact path behind `vramfit::estimate`: a step's recorded step program (detail/step_program.hpp)
/// run through the caching-allocator model at every segment placement considered, for the kinds of
/// step that were recorded (step-program files, program_file.hpp). Why placements matter: tests/validation/README.md.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "vramfit/alloc_conf.hpp"
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

/// Why no recorded program can apply to this model and step, whatever was recorded (one GPU, bf16,
/// the fused attention kernel, gated MLPs, the range and head_dims programs are checked at,
/// accumulation 1, the recorded LoRA target sets); empty when a program of its kind may apply.
inline std::string_view outside_recorded_steps(const ModelShape& m, const Step& s) {
  if (!s.single_gpu()) return "recorded on one GPU only";
  if (s.precision != Precision::bf16) return "recorded in bf16 only";
  if (s.attention != Attention::flash) return "recorded with SDPA's default fused kernel only";
  if (!m.gated_mlp) return "recorded for gated (SwiGLU) MLPs only";
  if (m.qk_norm) return "recorded without q/k norms (Llama, Qwen2, Mistral) only; Qwen3's are not";
  // Checked at seq 416 to 8192 and batch 1 to 7: outside a margin of that, SDPA may pick another
  // kernel (with other workspaces) and the programs are not used.
  if (s.seq < 256 || s.seq > 16384 || s.batch > 16)
    return "outside the range the programs are used in (seq 256 to 16384, batch up to 16)";
  // Each program gives back the 4-layer trace of its kind; below that some would free a request
  // their first layers never made (they throw), so the closed form answers.
  if (m.layers < 4) return "recorded for 4 layers and more only";
  if (s.grad_accum != 1) return "recorded with gradient accumulation 1 only";
  if (m.head_dimension() != 64 && m.head_dimension() != 128) return "recorded at head_dim 64 and 128 only";
  if (lora_targets_key(s) == "?") return "LoRA targets recorded: q_proj,v_proj; q_proj,k_proj,v_proj,o_proj; all-linear";
  return {};
}

/// The recorded entry of the step's kind among `entries` (a `ProgramSet`'s), or nullptr and why.
template <class Entries>
auto find_entry(const Entries& entries, const ModelShape& m, const Step& s, std::string_view& why)
    -> decltype(&*std::begin(entries)) {
  why = outside_recorded_steps(m, s);
  if (!why.empty()) return nullptr;
  const unsigned hd_bit = m.head_dimension() == 64 ? 1u : 2u;
  const std::string_view arch = m.qkv_bias ? "qwen2" : "llama";
  const std::string_view mode = s.mode == Mode::lora ? "lora" : "full";
  const std::string_view targets = lora_targets_key(s);
  for (const auto& e : entries) {
    if (e.arch == arch && e.tied == m.tied_embeddings && e.mode == mode && e.targets == targets &&
        e.checkpointing == s.gradient_checkpointing && e.logits_retained == s.logits_retained &&
        e.optimizer == s.optimizer && e.dropout == s.lora_dropout() && e.weights == s.weight_precision()) {
      if ((e.head_dims & hd_bit) == 0) why = "this kind of step was not checked at this head_dim";
      return why.empty() ? &e : nullptr;
    }
  }
  why = "this kind of step (architecture, head, mode, checkpointing, kept logits, optimizer, LoRA dropout, weights) "
        "was not recorded (vramfit-record records the plain loop's kinds on your GPU)";
  return nullptr;
}

inline ProgramDims program_dims(const ModelShape& m, const Step& s) {
  return ProgramDims{.batch = s.batch, .seq = s.seq, .hidden = m.hidden, .intermediate = m.intermediate,
                     .heads = m.heads, .kv_heads = m.kv_heads, .head_dim = m.head_dimension(), .vocab = m.vocab,
                     .rank = s.mode == Mode::lora ? s.lora.rank : 0};
}

/// The order the placements run in: `peaks` ascending, descending, the driver's, the scattered
/// ones; `fresh_process_first` the placements the GPU driver gives a fresh process (descending and
/// the driver's, `fresh_process_placements`) before ascending and the scattered ones, so that a
/// verdict knows whether the run fits in a fresh process before it tries the others.
enum class PlacementOrder : std::uint8_t { peaks, fresh_process_first };

/// How many placements `fresh_process_first` runs first: descending and the driver's at each
/// headroom, the orders that reproduce the recorded traces of fresh processes to the byte
/// (tests/validation/README.md#segment-placement); with expandable segments the one run.
constexpr std::size_t fresh_process_placements(bool expandable) {
  return expandable ? 1 : 2 + CachingAllocatorModel::kDriverHeadroomMax / CachingAllocatorModel::kDriverHeadroomStep;
}

/// Calls `run(order, headroom)` for every segment placement the simulation considers
/// (`CachingAllocatorModel::AddressOrder`): ascending, descending, the driver's at each of its
/// headrooms and the scattered ones (in `order`), until `run` answers false. With expandable
/// segments the placement of segments does not matter (one address range per pool): one run.
template <class F>
void for_each_placement(bool expandable, F&& run, PlacementOrder order = PlacementOrder::peaks) {
  using Order = CachingAllocatorModel::AddressOrder;
  const bool fresh_first = order == PlacementOrder::fresh_process_first;
  if (!fresh_first && !run(Order::ascending, 0)) return;
  if (expandable) {
    if (fresh_first) run(Order::ascending, 0);
    return;
  }
  if (!run(Order::descending, 0)) return;
  for (std::uint64_t h = 0; h <= CachingAllocatorModel::kDriverHeadroomMax; h += CachingAllocatorModel::kDriverHeadroomStep)
    if (!run(Order::driver, h)) return;
  if (fresh_first && !run(Order::ascending, 0)) return;
  for (std::uint64_t seed = 1; seed <= CachingAllocatorModel::kScatteredPlacements; ++seed)
    if (!run(Order::scattered, seed)) return;
}

/// The threads the placements of one simulation run on: `requested` (RunContext's
/// simulation_threads), or for 0 the hardware's; at most 8 either way.
inline unsigned simulation_threads(unsigned requested = 0) {
  static const unsigned hardware = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  return requested == 0 ? hardware : std::min(requested, 8u);
}

/// Runs `ops` at every placement of `for_each_placement` (on `simulation_threads(options.threads)` threads, each
/// run on its own allocator model) and hands the results to `fold` in the placement order, as a
/// serial loop would: until `fold` answers false, or rethrowing the first run's error. Runs after
/// one that `stops` (answers true for) are not needed and may be skipped.
template <class Fold, class Stops>
void run_placements(const ProgramOps& ops, Bytes held, bool empty_cache_after_build, const ProgramRunOptions& options,
                    bool expandable, Fold&& fold, Stops&& stops, PlacementOrder order = PlacementOrder::peaks) {
  using Order = CachingAllocatorModel::AddressOrder;
  std::vector<std::pair<Order, std::uint64_t>> placements;
  for_each_placement(
      expandable,
      [&](Order o, std::uint64_t h) {
        placements.emplace_back(o, h);
        return true;
      },
      order);
  struct Result {
    ProgramPeaks peaks;
    std::exception_ptr error;
  };
  std::vector<Result> results(placements.size());
  std::atomic<std::size_t> next{0}, cutoff{placements.size()};
  const auto work = [&] {
    for (std::size_t i = next++; i < cutoff.load(); i = next++) {
      bool stop = false;
      try {
        results[i].peaks = StepProgram::run(ops, held, empty_cache_after_build, options, placements[i].first,
                                            placements[i].second);
        stop = stops(results[i].peaks);
      } catch (...) {
        results[i].error = std::current_exception();
        stop = true;
      }
      for (std::size_t c = cutoff.load(); stop && i + 1 < c && !cutoff.compare_exchange_weak(c, i + 1);) {
      }
    }
  };
  const unsigned helpers =
      std::min<unsigned>(simulation_threads(options.threads), static_cast<unsigned>(placements.size())) - 1;
  std::vector<std::thread> threads;
  threads.reserve(helpers);
  try {
    for (unsigned t = 0; t < helpers; ++t) threads.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads: the ones started and this one do the work
  }
  work();
  for (std::thread& t : threads) t.join();
  for (std::size_t i = 0; i < cutoff.load(); ++i) {
    if (results[i].error) std::rethrow_exception(results[i].error);
    if (!fold(results[i].peaks)) return;
  }
}

/// Runs `program` under every segment placement (`for_each_placement`); keeps the largest figure
/// of each kind, with the phase of the placement that gives the peak. `held`: bytes the process
/// holds outside the program (in segments of their own).
inline PlacementPeaks simulate_placements(const ProgramOps& ops, const Step& s, Bytes held,
                                          bool empty_cache_after_build, const AllocConf& conf = {},
                                          unsigned threads = 0) {
  const bool first = s.peak_over == PeakOver::first_step;
  ProgramRunOptions options;
  options.conf = conf;
  options.threads = threads;
  PlacementPeaks out;
  const auto fold = [&](const ProgramPeaks& p) {
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
    return true;
  };
  run_placements(ops, held, empty_cache_after_build, options, conf.expandable_segments, fold,
                 [](const ProgramPeaks&) { return false; });
  // What the process holds outside the program sits in segments of its own, rounded up to the
  // 2 MiB the allocator rounds large segments to (the cuBLAS workspaces: 64 or 65 MiB).
  out.reserved = out.reserved + Bytes(checked_add(held.count(), (2ULL << 20) - 1) / (2ULL << 20) * (2ULL << 20));
  return out;
}
inline PlacementPeaks simulate_placements(const StepProgram& program, const ModelShape& m, const Step& s, Bytes held,
                                          bool empty_cache_after_build, const AllocConf& conf = {},
                                          unsigned threads = 0) {
  return simulate_placements(program.resolve(program_dims(m, s), m.layers), s, held, empty_cache_after_build, conf,
                             threads);
}

/// The requests behind `held` bytes made before the build: 32 MiB workspaces (cuBLAS's, one per
/// thread that ran a matmul), then 1 MiB ones (cuBLASLt's), then the rest as one request. The
/// hf-peft harness's 65 MiB: 32 + 32 + 1 MiB (tests/validation/README.md#workspaces).
inline std::vector<std::uint64_t> held_requests(Bytes held) {
  constexpr std::uint64_t big = 32ULL << 20, lt = 1ULL << 20;
  std::vector<std::uint64_t> out;
  std::uint64_t rest = held.count();
  for (; rest >= big && out.size() < 64; rest -= big) out.push_back(big);
  for (; rest >= lt && rest % lt == 0 && rest <= 4 * lt; rest -= lt) out.push_back(lt);
  if (rest > 0) out.push_back(rest);
  return out;
}

/// The run under a limit: whether every placement ran the build and `steps` steps, whether those
/// a fresh process gets did, the most reserved, and at the first placement that did not, the
/// request that failed and where. The placements run `PlacementOrder::fresh_process_first`.
struct PlacementVerdict {
  bool fits = true;
  /// Every placement of a fresh process (`fresh_process_placements`) ran: false only where one of
  /// them ran out. `fits` false with this true: the run fits or not by where the driver puts segments.
  bool fits_fresh_process = true;
  Bytes reserved_peak;  ///< over the steps, the largest of the placements run
  Bytes reserved_peak_fresh_process;  ///< the same over the fresh process's placements
  std::optional<CachingAllocatorModel::OutOfMemory> oom;
  std::string_view oom_phase;  ///< build, forward, backward, optimizer, zero_grad
  int oom_step = 0;            ///< 0: the build
  bool pressed = false;        ///< the limit refused a segment somewhere (caches were released)
  std::size_t placements = 0;  ///< placements folded in

  /// Folds in the next placement's run; the runs must come in `fresh_process_first` order (the
  /// first `fresh_process_placements` are a fresh process's). False once one ran out.
  bool add(const ProgramPeaks& p, bool expandable) {
    const bool fresh = placements++ < fresh_process_placements(expandable);
    reserved_peak = max(reserved_peak, p.reserved_peak);
    if (fresh) reserved_peak_fresh_process = max(reserved_peak_fresh_process, p.reserved_peak);
    pressed = pressed || p.limit_refusals > 0;
    if (!p.oom) return true;
    fits = false;
    fits_fresh_process = !fresh;
    oom = p.oom;
    oom_phase = enum_name(p.oom_phase);
    oom_step = p.oom_step;
    return false;
  }
};

/// Runs `program` under `limit` bytes (c10's allowed_memory_maximum) and `conf` at every placement
/// until one runs out of memory; `held` bytes are requested before the build (`held_requests`).
inline PlacementVerdict simulate_under_limit(const ProgramOps& ops, Bytes held, bool empty_cache_after_build,
                                             const AllocConf& conf, std::uint64_t limit, int steps = 3,
                                             unsigned threads = 0) {
  ProgramRunOptions options;
  options.limit = limit;
  options.conf = conf;
  options.held_requests = held_requests(held);
  options.steps = steps;
  options.threads = threads;
  PlacementVerdict out;
  run_placements(
      ops, held, empty_cache_after_build, options, conf.expandable_segments,
      [&](const ProgramPeaks& p) { return out.add(p, conf.expandable_segments); },
      [](const ProgramPeaks& p) { return p.oom.has_value(); }, PlacementOrder::fresh_process_first);
  return out;
}

inline PlacementVerdict simulate_under_limit(const StepProgram& program, const ModelShape& m, const Step& s, Bytes held,
                                             bool empty_cache_after_build, const AllocConf& conf, std::uint64_t limit,
                                             int steps = 3, unsigned threads = 0) {
  return simulate_under_limit(program.resolve(program_dims(m, s), m.layers), held, empty_cache_after_build, conf, limit,
                              steps, threads);
}

/// A loop of varied lengths (`StepProgram::resolve_loop`) at every placement: the largest allocated
/// peak and reserved figures, and under `limit` whether every placement ran every step (stopping at
/// the first that did not). `held` bytes are requested before the build (`held_requests`).
struct LoopPeaks {
  Bytes peak;               ///< allocated, over the loop's steps
  std::string_view phase;   ///< where `peak` falls
  Bytes reserved_peak;      ///< the most reserved over the steps
  PlacementVerdict verdict; ///< under `limit` (without one: fits, no OOM, no figures)
};
inline LoopPeaks simulate_loop(const ProgramOps& ops, std::size_t steps, Bytes held, const AllocConf& conf,
                               std::optional<std::uint64_t> limit, unsigned threads = 0) {
  ProgramRunOptions options;
  options.limit = limit;
  options.conf = conf;
  options.held_requests = held_requests(held);
  options.steps = static_cast<int>(std::min<std::size_t>(steps, 1u << 30));
  options.threads = threads;
  LoopPeaks out;
  const auto fold = [&](const ProgramPeaks& p) {
    if (out.phase.empty() || p.steady > out.peak) {
      out.peak = p.steady;
      out.phase = enum_name(p.steady_phase);
    }
    out.reserved_peak = max(out.reserved_peak, p.reserved_peak);
    // Without a limit nothing runs out and the placements run in the peaks' order: no verdict.
    return !limit || out.verdict.add(p, conf.expandable_segments);
  };
  run_placements(ops, held, false, options, conf.expandable_segments, fold,
                 [](const ProgramPeaks& p) { return p.oom.has_value(); },
                 limit ? PlacementOrder::fresh_process_first : PlacementOrder::peaks);
  return out;
}
inline LoopPeaks simulate_loop(const StepProgram& program, const ModelShape& m, const Step& s, Bytes held,
                               std::span<const std::uint64_t> lengths, const AllocConf& conf,
                               std::optional<std::uint64_t> limit, unsigned threads = 0) {
  return simulate_loop(program.resolve_loop(program_dims(m, s), lengths, m.layers), lengths.size(), held, conf, limit,
                       threads);
}

/// `StepProgram::run_slack_bound` at every placement: the largest bound (the placement decides the
/// slack of the blocks made before the first sequence-dependent request, which is not charged).
inline Bytes simulate_slack_bound(const StepProgram& program, const ModelShape& m, const Step& s, Bytes held,
                                  const AllocConf& conf, unsigned threads = 0) {
  ProgramRunOptions options;
  options.conf = conf;
  options.held_requests = held_requests(held);
  options.steps = 3;
  options.threads = threads;
  Bytes out;
  run_placements(program.resolve_slack_bound(program_dims(m, s), m.layers), held, false, options,
                 conf.expandable_segments,
                 [&](const ProgramPeaks& p) {
                   out = max(out, p.slack_bound);
                   return true;
                 },
                 [](const ProgramPeaks&) { return false; });
  return out;
}

}  // namespace vramfit::detail
