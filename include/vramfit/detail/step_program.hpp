#pragma once
/// @file step_program.hpp
/// A step program: the sequence of allocator requests and frees of a whole training run (the
/// build, then two steps), recorded once on the GPU for one stack and one kind of step, with every
/// size written over the model's and step's dimensions and the decoder layers as repeats. Run for
/// a model shape and step through `CachingAllocatorModel`, it gives the allocator's peak of
/// allocated bytes, slack included, without a GPU.
///
/// Programs come from traces (tests/validation/trace_capture.py --marks, `vramfit probe --trace-out`)
/// turned into this form by tests/validation/trace_program.py (step-program files, program_file.hpp). What was
/// recorded and how it is checked: tests/validation/README.md#step-programs
///
/// The flat form (int32): a size table, then blocks.
///   sizes:  n, then per size: terms (or a negative `SizeKind`), per term (coef, factors, f0..f3:
///           `Dim` indices, -1 unused), then a constant. reduce_*: the outputs' and the inputs'
///           products (factors, f0..f3 each) and 0; flash_*: 0; tensor_chunks: bytes per element,
///           tensors per layer, tensors outside the layers, k (0 to 8), k products (factors,
///           f0..f3 each: the tensors' element counts), and 0.
///   blocks: n, then per block: `BlockKind`, step (0 build, 1, 2), `ProgramPhase`, and
///           sequence: parts, per part: repeat? (0/1), c (a repeat runs layers - c times), tokens;
///           layers:   down? (1: layers L-1..0), lo, hi, template tokens, then the tokens of layers
///                     0..lo-1 and of layers L-1, L-2, ... (hi of them), which differ from the template.
///   tokens: n, then 5 ints each: `TokenOp`, then (size index, 0, 0, 0) for a request, or the
///           operands that name an earlier request relative to the current repeat or layer (`resolve`).

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vramfit/alloc_conf.hpp"
#include "vramfit/detail/allocator.hpp"
#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"
#include "vramfit/detail/enum_names.hpp"

namespace vramfit::detail {

/// A size factor: the dimension it names, by its index in the flat form.
enum class Dim : std::int32_t {
  batch, seq, hidden, intermediate, heads, kv_heads, head_dim, vocab, rank,
  seq_plus_one,    ///< S + 1 (the labels padded by one)
  seq_padded_128,  ///< S rounded up to 128 (flash attention's padded sequence)
  seq_minus_one,   ///< S - 1 (the Trainer's count of the labels the loss takes: labels[..., 1:])
};
inline constexpr std::int32_t dim_count = 12;

/// How a size is computed: a sum of products of dimensions, or by a kernel's launch rules. The
/// flat form writes the computed kinds as negative term counts. `tensor_chunks`: bytes per
/// trainable tensor and per chunk of the largest (`foreach_norm_partials_bytes`), or with no
/// products one element per tensor (the clip's stack of per-tensor norms): sizes that grow with
/// the layer count.
enum class SizeKind : std::int32_t {
  products = 0, reduce_buffer = -1, reduce_semaphore = -2, flash_lse = -3, flash_out = -4, tensor_chunks = -5
};

/// The Trainer clips the grads before each optimizer step (`clip_grad_norm_`, max_grad_norm 1.0):
/// one `torch._foreach_norm` over the trainable tensors, whose CUDA kernel first asks for a zeroed
/// partial sum in the opmath type per tensor and per 65536-element chunk of the largest tensor
/// (`foreach_tensor_norm_cuda`'s output_per_tensor, ntensors * max_chunks_per_tensor elements, with
/// multi_tensor_apply's kChunkSize 65536; ATen's native/cuda/ForeachReduceOp.cu).
/// 0 when the largest tensor is empty (no chunk: ATen asks for nothing).
inline std::uint64_t foreach_norm_partials_bytes(std::uint64_t element_bytes, std::uint64_t tensors,
                                                 std::uint64_t largest_numel) {
  constexpr std::uint64_t chunk = 65536;
  const std::uint64_t chunks = largest_numel / chunk + (largest_numel % chunk != 0 ? 1 : 0);
  return checked_mul(checked_mul(element_bytes, tensors), chunks);
}

/// A token: a request (of a size index), or a free of an earlier request named relative to the
/// current repeat or layer (see `StepProgram::resolve`). Names as trace_program.py writes them.
enum class TokenOp : std::int32_t {
  request, self, cand, rep, rep_mirrored, rel, lsub, xrep, xrep_absolute, xrep_from_end,
  layer_relative, layer_mirrored, layer_absolute, layer_from_end,
};
template <>
struct EnumNames<TokenOp> {
  static constexpr std::string_view what = "token kind";
  static constexpr auto names = std::to_array<std::pair<TokenOp, std::string_view>>({
                   {TokenOp::request, "request"}, {TokenOp::self, "self"}, {TokenOp::cand, "cand"},
                   {TokenOp::rep, "rep"}, {TokenOp::rep_mirrored, "repM"}, {TokenOp::rel, "rel"},
                   {TokenOp::lsub, "lsub"}, {TokenOp::xrep, "xrep"}, {TokenOp::xrep_absolute, "xrepA"},
                   {TokenOp::xrep_from_end, "xrepE"}, {TokenOp::layer_relative, "ljR"},
                   {TokenOp::layer_mirrored, "ljM"}, {TokenOp::layer_absolute, "ljA"},
                   {TokenOp::layer_from_end, "ljE"}});
};

/// The part of a run a block belongs to.
enum class ProgramPhase : std::int32_t { build, forward, backward, optimizer, zero_grad };
template <>
struct EnumNames<ProgramPhase> {
  static constexpr std::string_view what = "program phase";
  static constexpr auto names = std::to_array<std::pair<ProgramPhase, std::string_view>>({
                   {ProgramPhase::build, "build"}, {ProgramPhase::forward, "forward"},
                   {ProgramPhase::backward, "backward"}, {ProgramPhase::optimizer, "optimizer"},
                   {ProgramPhase::zero_grad, "zero_grad"}});
};

/// A block: a sequence of literal and repeated parts, or one pass over the decoder layers.
enum class BlockKind : std::int32_t { sequence, layers };

/// `value` as an enum whose values are 0 to `count` - 1, or `InvalidInput` naming `what`.
template <class E>
E program_enum(std::int32_t value, std::int32_t count, const char* what) {
  if (value < 0 || value >= count) throw InvalidInput("program", std::string(what) + " out of range");
  return static_cast<E>(value);
}

/// The dimensions a program's sizes are written in, and the GPU's multiprocessors (for the
/// reductions' staging buffers; the programs were recorded on an H200, 132 of 2048 threads each).
struct ProgramDims {
  std::uint64_t batch = 1, seq = 1, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0,
                vocab = 0, rank = 0;
  std::uint64_t multiprocessors = 132, threads_per_multiprocessor = 2048;
  [[nodiscard]] std::uint64_t operator[](Dim k) const {
    switch (k) {
      case Dim::batch: return batch;
      case Dim::seq: return seq;
      case Dim::hidden: return hidden;
      case Dim::intermediate: return intermediate;
      case Dim::heads: return heads;
      case Dim::kv_heads: return kv_heads;
      case Dim::head_dim: return head_dim;
      case Dim::vocab: return vocab;
      case Dim::rank: return rank;
      case Dim::seq_plus_one: return checked_add(seq, 1);
      case Dim::seq_padded_128: return checked_add(seq, 127) / 128 * 128;
      case Dim::seq_minus_one: return checked_sub(seq, 1);
    }
    throw InvalidInput("program", "size factor out of range");
  }
};

/// The staging buffer and semaphore PyTorch's CUDA sum of a [inputs, outputs] bf16 tensor over its
/// rows asks for when its launch splits the rows ({0, 0} otherwise): the grads of norm weights and
/// q/k/v biases. Ported from setReduceConfig in ATen's Reduce.cuh; checked against H200 traces.
struct ReduceBytes {
  std::uint64_t buffer = 0, semaphore = 0;
};
inline ReduceBytes reduce_sizes(std::uint64_t outputs, std::uint64_t inputs, std::uint64_t multiprocessors = 132,
                                std::uint64_t threads_per_multiprocessor = 2048) {
  if (outputs == 0 || inputs <= 1 || multiprocessors == 0) return {};
  const auto last_pow2 = [](std::uint64_t n) {
    std::uint64_t p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
  };
  const auto div_up = [](std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); };
  std::uint64_t vec = 4;  // output columns a thread handles
  while (outputs % vec != 0) vec /= 2;
  const std::uint64_t dim0 = outputs / vec, dim1 = inputs, max_threads = 512 / vec;
  const std::uint64_t d0 = dim0 < max_threads ? last_pow2(dim0) : max_threads;
  const std::uint64_t d1 = dim1 < max_threads ? last_pow2(dim1) : max_threads;
  std::uint64_t width = std::min<std::uint64_t>(d0, 32);
  const std::uint64_t height = std::min(d1, max_threads / width);
  width = std::min(d0, max_threads / height);
  std::uint64_t step_output = width, step_input = 1;
  const bool split_in_block = inputs >= std::min<std::uint64_t>(height * 16, 256);
  if (split_in_block) step_input *= height;
  else step_output *= height;
  const std::uint64_t grid = div_up(outputs / vec, step_output);
  const std::uint64_t per_thread = div_up(inputs, step_input);
  const std::uint64_t target = multiprocessors * (threads_per_multiprocessor / (width * height));
  if (!split_in_block || per_thread < 256 || grid > target) return {};
  const std::uint64_t ctas = std::max(std::min(div_up(target, grid), div_up(per_thread, 16)), div_up(per_thread, 256));
  if (ctas <= 1) return {};
  using detail::checked_mul;
  return {checked_mul(checked_mul(checked_mul(checked_mul(4, outputs), ctas), width), vec), checked_mul(4, grid)};
}

/// How many blocks flash attention's forward splits the keys across: 1 unless batch x heads x
/// ceil(seq / 64) would fill under 80% of 2 x multiprocessors block slots. Ported from
/// num_splits_heuristic in ATen's flash_api.cpp; checked against H200 traces.
inline std::uint64_t flash_splits(std::uint64_t batch, std::uint64_t heads, std::uint64_t seq, std::uint64_t head_dim,
                                  std::uint64_t multiprocessors = 132) {
  const auto div_up = [](std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); };
  const std::uint64_t blocks = detail::checked_mul(detail::checked_mul(batch, heads), div_up(seq, 64));
  const std::uint64_t slots = 2 * multiprocessors;
  if (static_cast<double>(blocks) >= 0.8 * static_cast<double>(slots)) return 1;
  const std::uint64_t n_blocks = div_up(seq, head_dim <= 64 ? 256 : head_dim <= 128 ? 128 : 64);
  const std::uint64_t most = std::min<std::uint64_t>({128, slots, n_blocks});
  const auto eligible = [&](std::uint64_t k) { return k == 1 || div_up(n_blocks, k) != div_up(n_blocks, k - 1); };
  const auto efficiency = [&](std::uint64_t k) {
    const double waves = static_cast<double>(blocks * k) / static_cast<double>(slots);
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (std::uint64_t k = 1; k <= most; ++k)
    if (eligible(k)) best = std::max(best, efficiency(k));
  for (std::uint64_t k = 1; k <= most; ++k)
    if (eligible(k) && efficiency(k) >= 0.85 * best) return k;
  return 1;
}

/// Bytes of flash attention's split accumulators: softmax_lse_accum (splits x B x H x S fp32) and
/// out_accum (the same x head_dim rounded up to 32); {0, 0} without a split.
struct FlashAccumulators {
  std::uint64_t lse = 0, out = 0;
};
inline FlashAccumulators flash_accumulator_bytes(std::uint64_t batch, std::uint64_t heads, std::uint64_t seq,
                                                 std::uint64_t head_dim, std::uint64_t multiprocessors = 132) {
  const std::uint64_t k = flash_splits(batch, heads, seq, head_dim, multiprocessors);
  if (k <= 1) return {};
  using detail::checked_mul;
  const std::uint64_t lse = checked_mul(checked_mul(checked_mul(checked_mul(4, k), batch), heads), seq);
  return {lse, checked_mul(lse, (head_dim + 31) / 32 * 32)};
}

/// What running a program gives: peaks of allocated bytes from the first step on (the build's own
/// transients are not in them), and where they fell.
struct ProgramPeaks {
  Bytes first;                  ///< over step 1
  Bytes steady;                 ///< over steps 1 and 2
  Bytes after_build;            ///< allocated when the build is done (weights, adapters)
  Bytes reserved;               ///< the program's segments at the end of the run (none is released in a step)
  ProgramPhase first_phase = ProgramPhase::build;
  ProgramPhase steady_phase = ProgramPhase::build;
  std::size_t requests = 0;
  Bytes reserved_peak;          ///< the most reserved over the steps (the build's segments included)
  /// `StepProgram::run_slack_bound`: the most allocated plus, on every live block made from the first
  /// sequence-dependent request on, what c10's rules let that block hold beyond its request and did not.
  Bytes slack_bound;
  /// Under a limit: the request that did not fit, and where (step 0: the build).
  std::optional<CachingAllocatorModel::OutOfMemory> oom;
  ProgramPhase oom_phase = ProgramPhase::build;
  int oom_step = 0;
  std::size_t limit_refusals = 0;  ///< new segments the limit refused (0: it was never reached)
};

/// How a program runs beyond the plain replay: the allocator's limit and settings, the requests
/// the process made before the build (held through the run, so the limit sees them), and the
/// steps (3 runs step 2's blocks once more, as the validation harness's three steps; a loop's ops,
/// `StepProgram::resolve_loop`, hold as many as it has lengths).
struct ProgramRunOptions {
  std::optional<std::uint64_t> limit;
  AllocConf conf;
  std::vector<std::uint64_t> held_requests;
  int steps = 2;
  unsigned threads = 0;  ///< the placements' threads (`run_placements`): 0 the hardware's, at most 8
};

/// A map of 64-bit keys (never ~0) to values, open addressing with linear probing: the
/// resolver's look-ups of live requests, without a node per request.
template <class V>
class KeyMap {
 public:
  /// The value of `k`, or nullptr.
  const V* find(std::uint64_t k) const {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = home(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  V* find(std::uint64_t k) { return const_cast<V*>(static_cast<const KeyMap&>(*this).find(k)); }
  void set(std::uint64_t k, V v) {
    if (V* x = find(k)) {
      *x = v;
      return;
    }
    if ((size_ + 1) * 2 > slots_.size()) grow();
    std::size_t i = home(k);
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = {k, v};
    ++size_;
  }
  /// Removes `k`; whether it was there.
  bool erase(std::uint64_t k) {
    if (slots_.empty()) return false;
    std::size_t i = home(k);
    while (slots_[i].key != k) {
      if (slots_[i].key == kEmpty) return false;
      i = (i + 1) & mask_;
    }
    // Backward shift: entries after the hole that may move into it do.
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != kEmpty; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].key = kEmpty;
    --size_;
    return true;
  }
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& x : slots_)
      if (x.key != kEmpty) f(x.key, x.value);
  }

 private:
  static constexpr std::uint64_t kEmpty = ~0ULL;
  struct Slot {
    std::uint64_t key = kEmpty;
    V value{};
  };
  std::size_t home(std::uint64_t k) const { return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ULL) >> shift_); }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const std::size_t n = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(n));
    size_ = 0;
    for (const Slot& x : old)
      if (x.key != kEmpty) set(x.key, x.value);
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, size_ = 0;
  unsigned shift_ = 64;
};

/// A program resolved for one model shape and step: its requests and frees in order, each free
/// naming its request by a slot, so the runs under many placements look no keys up. Steps 1 to 3
/// (3: step 2's blocks again), or a loop's steps (`StepProgram::resolve_loop`); a run of fewer
/// steps stops at the next step's mark. An error the program raises at these dimensions is kept
/// where it arises and raised when a run reaches it.
struct ProgramOps {
  /// charged_request: a request whose block `StepProgram::run_slack_bound` charges the most slack.
  enum class Code : std::uint8_t { request, charged_request, free, phase, step, fail };
  struct Op {
    Code code;
    std::uint32_t arg;    ///< request, free: the slot; phase: the `ProgramPhase`; step: the step begun
    std::uint64_t bytes;  ///< request: the bytes asked for
  };
  std::vector<Op> ops;
  std::size_t slots = 0;
  std::exception_ptr error;  ///< raised at `Code::fail`
  bool bound = false;        ///< a run notes `ProgramPeaks::slack_bound` (`resolve_slack_bound`)
};

/// The most bytes c10's rules let a live block of a `rounded` request hold beyond it, whatever the
/// history of the pool (`should_split`, `get_free_block` in CUDACachingAllocator.cpp): none in the
/// small pool (split whenever 512 B remain) or with expandable segments (the same rule in the large
/// pool); 1 MiB for a large block under max_split_size (split only when more than kSmallSize
/// remains); under kLargeBuffer for one at or above it (never split; get_free_block takes no
/// cached block of its size plus kLargeBuffer or more, a new segment adds under 2 MiB).
constexpr std::uint64_t max_block_slack(std::uint64_t rounded, const AllocConf& conf) {
  if (rounded <= CachingAllocatorModel::kSmallSize || conf.expandable_segments) return 0;
  if (!conf.max_split_size || rounded < *conf.max_split_size) return CachingAllocatorModel::kSmallSize;
  return CachingAllocatorModel::kLargeBuffer - CachingAllocatorModel::kMinBlockSize;
}

class StepProgram {
 public:

  explicit StepProgram(std::span<const std::int32_t> flat) { parse(flat); }

  /// Runs the program for `layers` decoder layers; `baseline` bytes are allocated before it (the
  /// cuBLAS workspaces). With `empty_cache_after_build`, the cache is emptied between the build
  /// and the first step (as the validation harness does). `order`, `headroom`: where new segments
  /// sit in the allocator model (`CachingAllocatorModel`).
  [[nodiscard]] ProgramPeaks run(const ProgramDims& dims, std::uint64_t layers, Bytes baseline,
                                 bool empty_cache_after_build,
                                 CachingAllocatorModel::AddressOrder order = CachingAllocatorModel::AddressOrder::ascending,
                                 std::uint64_t headroom = 0) const {
    return run(dims, layers, baseline, empty_cache_after_build, ProgramRunOptions{}, order, headroom);
  }
  /// As above, with `options`. With held requests the baseline is not added (they are in the
  /// allocator). Under a limit the run stops at the first request that does not fit (`oom`).
  [[nodiscard]] ProgramPeaks run(const ProgramDims& dims, std::uint64_t layers, Bytes baseline,
                                 bool empty_cache_after_build, const ProgramRunOptions& options,
                                 CachingAllocatorModel::AddressOrder order, std::uint64_t headroom) const {
    if (layers == 0 || layers > (1u << 20)) throw InvalidInput("layers", "must be 1 to 1048576");
    if (options.steps < 1 || options.steps > 3) throw InvalidInput("steps", "must be 1 to 3");
    return run(resolve(dims, layers), baseline, empty_cache_after_build, options, order, headroom);
  }

  /// The program's requests and frees for these dimensions and layers (`ProgramOps`), to run under
  /// many placements.
  [[nodiscard]] ProgramOps resolve(const ProgramDims& dims, std::uint64_t layers) const {
    const std::vector<std::uint64_t> sizes = sizes_at(dims, layers);
    const std::vector<const std::vector<std::uint64_t>*> steps(3, &sizes);
    return resolve_steps(steps, layers, StepsKind::fixed);
  }

  /// A loop of varied lengths (dynamic padding) in one process, resolved: the build and step 1 at
  /// `seqs[0]` (`dims.seq` is ignored), then step 2's blocks once for each further length. Before
  /// every step after the first, the build's requests that depend on the sequence (the batch: input
  /// ids and labels) are made again at the step's length while the previous ones are held, then
  /// those are freed, as `batch = next(it)` in a loop body does. The ops grow with the steps
  /// (step 2's each: some 6,000 ops, 100 KB, for a 24-layer LoRA step).
  [[nodiscard]] ProgramOps resolve_loop(const ProgramDims& dims, std::span<const std::uint64_t> seqs,
                                        std::uint64_t layers) const {
    if (seqs.empty()) throw InvalidInput("lengths", "a loop needs at least one length");
    std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> at;  // sizes by length, once each
    at.reserve(seqs.size());  // never reallocated: `steps` points into it
    std::vector<const std::vector<std::uint64_t>*> steps;
    steps.reserve(seqs.size());
    for (const std::uint64_t q : seqs) {
      auto it = std::find_if(at.begin(), at.end(), [&](const auto& e) { return e.first == q; });
      if (it == at.end()) {
        ProgramDims d = dims;
        d.seq = q;
        at.emplace_back(q, sizes_at(d, layers));
        it = std::prev(at.end());
      }
      steps.push_back(&it->second);
    }
    return resolve_steps(steps, layers, StepsKind::loop);
  }

  /// `run_slack_bound`'s loop resolved: three steps with every request at its largest size over
  /// lengths 1 to `dims.seq` (`longest_sizes`), its requests from the first sequence-dependent one
  /// on charged (`ProgramOps::Code::charged_request`).
  [[nodiscard]] ProgramOps resolve_slack_bound(const ProgramDims& dims, std::uint64_t layers) const {
    const std::vector<std::uint64_t> longest = longest_sizes(dims, layers);
    const std::vector<const std::vector<std::uint64_t>*> steps(3, &longest);
    return resolve_steps(steps, layers, StepsKind::slack_bound);
  }

  /// Runs the loop of `resolve_loop` (every step; `options.steps` is not read). `first` is step
  /// 1's peak, `steady` the loop's.
  [[nodiscard]] ProgramPeaks run_loop(const ProgramDims& dims, std::span<const std::uint64_t> seqs,
                                      std::uint64_t layers, Bytes baseline, const ProgramRunOptions& options,
                                      CachingAllocatorModel::AddressOrder order, std::uint64_t headroom) const {
    ProgramRunOptions all = options;
    all.steps = static_cast<int>(std::min<std::size_t>(seqs.size(), 1u << 30));
    return run(resolve_loop(dims, seqs, layers), baseline, false, all, order, headroom);
  }

  /// An upper bound of the allocated peak of every loop of lengths up to `dims.seq` (at
  /// `dims.batch`), any number of steps (`ProgramPeaks::slack_bound`): three steps of the loop where
  /// every request takes its largest size over lengths 1 to `dims.seq` (`longest_sizes`), each live
  /// block from the first sequence-dependent request on charged the most slack c10's rules allow
  /// (`max_block_slack`). Why it bounds: tests/validation/README.md#varied-lengths
  [[nodiscard]] ProgramPeaks run_slack_bound(const ProgramDims& dims, std::uint64_t layers, Bytes baseline,
                                             const ProgramRunOptions& options, CachingAllocatorModel::AddressOrder order,
                                             std::uint64_t headroom) const {
    ProgramRunOptions all = options;
    all.steps = 3;
    return run(resolve_slack_bound(dims, layers), baseline, false, all, order, headroom);
  }

  /// Each size's largest value over sequence lengths 1 to `dims.seq` at the other dimensions of
  /// `dims` and `layers`: a sum of products with positive coefficients grows with the length, so
  /// its value at `dims.seq`, as does a size of `tensor_chunks` (its products have positive
  /// coefficients); the sizes computed by launch rules (`SizeKind`) by trying every length.
  [[nodiscard]] std::vector<std::uint64_t> longest_sizes(const ProgramDims& dims, std::uint64_t layers) const {
    std::vector<std::uint64_t> out;
    out.reserve(sizes_.size());
    for (const auto& z : sizes_) {
      if (z.kind == SizeKind::products || z.kind == SizeKind::tensor_chunks) {
        out.push_back(evaluate(z, dims, layers));
        continue;
      }
      std::uint64_t most = 0;
      ProgramDims d = dims;
      for (d.seq = 1; d.seq <= dims.seq; ++d.seq) most = std::max(most, evaluate(z, d, layers));
      out.push_back(most);
    }
    return out;
  }

  /// Runs resolved `ops` (`resolve`, `resolve_loop`, `resolve_slack_bound`) as the overload above
  /// runs the program: up to `options.steps` steps (any number for a loop's ops).
  [[nodiscard]] static ProgramPeaks run(const ProgramOps& ops, Bytes baseline, bool empty_cache_after_build,
                                        const ProgramRunOptions& options, CachingAllocatorModel::AddressOrder order,
                                        std::uint64_t headroom) {
    if (options.steps < 1) throw InvalidInput("steps", "must be at least 1");
    // Each thread's model, handles and slack charges, kept from run to run for their storage.
    thread_local CachingAllocatorModel model;
    thread_local std::vector<CachingAllocatorModel::Handle> handles;
    thread_local std::vector<std::uint64_t> charges;  // by slot (ops.bound): the slack charged
    model.reset(order, headroom);
    if (options.limit || options.conf != AllocConf{}) model.configure(options.limit, options.conf);
    if (!options.held_requests.empty()) baseline = Bytes{};
    handles.assign(ops.slots, CachingAllocatorModel::null_handle);
    if (ops.bound) charges.assign(ops.slots, 0);
    ProgramPeaks out;
    ProgramPhase phase = ProgramPhase::build, peak_phase = ProgramPhase::build;
    std::uint64_t peak = 0, charged = 0, bound_peak = 0;
    bool track = false;
    std::size_t requests = 0;
    int step = 0;
    const auto note_bound = [&] {
      if (track) bound_peak = std::max(bound_peak, checked_add(model.allocated().count(), charged));
    };
    const auto end_step = [&](int ended) {
      if (ended == 0) {
        if (empty_cache_after_build) model.empty_cache();
        out.after_build = baseline + model.allocated();
        model.reset_peaks();
        track = true;
        if (ops.bound) note_bound();
      } else if (ended == 1) {
        out.first = baseline + Bytes(peak);
        out.first_phase = peak_phase;
      }
    };
    const auto oom = [&] {
      out.oom = model.oom();
      out.oom_phase = phase;
      out.oom_step = step;
    };
    bool stopped = false;
    for (const std::uint64_t h : options.held_requests)
      if (model.malloc(h) == CachingAllocatorModel::oom_handle) {
        oom();
        stopped = true;
        break;
      }
    for (const ProgramOps::Op* op = ops.ops.data(), *end = op + ops.ops.size(); op != end && !stopped; ++op) {
      switch (op->code) {
        case ProgramOps::Code::request:
        case ProgramOps::Code::charged_request: {
          const auto h = model.malloc(op->bytes);
          if (h == CachingAllocatorModel::oom_handle) {
            oom();
            stopped = true;
            break;
          }
          ++requests;
          handles[op->arg] = h;
          if (ops.bound) {
            if (op->code == ProgramOps::Code::charged_request) {
              const std::uint64_t rounded = CachingAllocatorModel::round_size(op->bytes);
              const std::uint64_t most = checked_add(rounded, max_block_slack(rounded, options.conf));
              const std::uint64_t held = model.block_size(h);
              if (held > most) throw InvalidInput("allocator", "a block holds more slack than c10's rules allow");
              charges[op->arg] = most - held;
              charged += most - held;
            }
            note_bound();
          }
          if (track && model.allocated().count() > peak) {
            peak = model.allocated().count();
            peak_phase = phase;
          }
          break;
        }
        case ProgramOps::Code::free:
          if (ops.bound) {
            charged -= charges[op->arg];
            charges[op->arg] = 0;
          }
          model.free(handles[op->arg]);
          break;
        case ProgramOps::Code::phase: phase = static_cast<ProgramPhase>(op->arg); break;
        case ProgramOps::Code::step: {
          const int next = static_cast<int>(op->arg);
          if (next > options.steps) {
            stopped = true;
            break;
          }
          if (next <= 2) end_step(step);  // steps 3 on repeat step 2: nothing ends there
          step = next;
          break;
        }
        case ProgramOps::Code::fail: std::rethrow_exception(ops.error);
      }
    }
    if (step == 1) end_step(1);
    out.steady = baseline + Bytes(peak);
    out.steady_phase = peak_phase;
    out.reserved = model.reserved();
    out.reserved_peak = model.peak_reserved();
    out.limit_refusals = model.limit_refusals();
    out.requests = requests;
    out.slack_bound = baseline + Bytes(bound_peak);
    return out;
  }

 private:
  // How `resolve_steps` runs its steps: the fixed shape's three; a loop's (`resolve_loop`); the
  // slack bound's loop (`resolve_slack_bound`).
  enum class StepsKind { fixed, loop, slack_bound };

  std::vector<std::uint64_t> sizes_at(const ProgramDims& dims, std::uint64_t layers) const {
    std::vector<std::uint64_t> sizes;
    sizes.reserve(sizes_.size());
    for (const auto& s : sizes_) sizes.push_back(evaluate(s, dims, layers));
    return sizes;
  }

  // The build, then step k at sizes `steps[k - 1]` (the build at step 1's): step 1's blocks, then
  // step 2's for each further step. A fixed shape's steps with no blocks are left out; a loop makes
  // its batch again before each step after the first and runs every step (`resolve_loop`).
  ProgramOps resolve_steps(std::span<const std::vector<std::uint64_t>* const> steps, std::uint64_t layers,
                           StepsKind kind) const {
    if (layers == 0 || layers > (1u << 20)) throw InvalidInput("layers", "must be 1 to 1048576");
    const bool loop = kind != StepsKind::fixed;
    Resolver r(*this, layers, steps.front());
    r.loop = loop;
    r.bound = kind == StepsKind::slack_bound;
    r.out.bound = r.bound;
    r.out.ops.reserve(op_bound(layers, steps.size() - 1));
    r.slot_bytes.reserve(r.out.ops.capacity() / 2);
    const auto has_blocks = [&](int step) {
      return std::any_of(blocks_.begin(), blocks_.end(), [&](const Block& b) { return b.step == step; });
    };
    std::vector<std::pair<std::uint64_t, std::uint64_t>> renames;  // step 2's leftovers -> the keys step 2 frees
    try {
      for (std::size_t k = 0; k <= steps.size(); ++k) {
        const int step = static_cast<int>(std::min<std::size_t>(k, 2));
        if (k > 0) {
          if (!loop && !has_blocks(step)) continue;
          r.sizes = steps[k - 1];
          r.emit(ProgramOps::Code::step, static_cast<std::uint32_t>(k));
          if (loop && k >= 2) r.new_batch();
        }
        // Steps 3 on: what step 2 left live (its loss, ...) is freed by the same tokens as step 1's was.
        if (k == 3) renames = r.step_renames(!loop);
        if (k >= 3) r.rename(renames);
        r.record_frees = k == 2;
        for (std::size_t b = 0; b < blocks_.size(); ++b) {
          if (blocks_[b].step != step) continue;
          r.emit(ProgramOps::Code::phase, static_cast<std::uint32_t>(blocks_[b].phase));
          r.block(b);
        }
      }
    } catch (const InvalidInput&) {
      r.out.error = std::current_exception();
      r.emit(ProgramOps::Code::fail, 0);
    }
    r.out.slots = r.slot_bytes.size();
    return std::move(r.out);
  }

  // At most the ops `resolve_steps` emits for `layers` layers (step 2's blocks counted `repeats`
  // times; a loop's batches not counted).
  std::size_t op_bound(std::uint64_t layers, std::size_t repeats) const {
    std::size_t n = 2;
    for (const Block& b : blocks_) {
      std::size_t k = 2;
      for (const Part& part : b.parts)
        k += part.tokens.size() * (part.repeat ? static_cast<std::size_t>(std::max<std::int64_t>(
                                                     static_cast<std::int64_t>(layers) - part.c, 0))
                                               : 1);
      if (b.kind == BlockKind::layers) {
        std::size_t most = b.layer_template.size();
        for (const auto& t : b.lo_special) most = std::max(most, t.size());
        for (const auto& t : b.hi_special) most = std::max(most, t.size());
        k += most * layers;
      }
      n += b.step == 2 ? std::min<std::size_t>(repeats, std::size_t{1} << 20) * k : k;
    }
    return std::min<std::size_t>(n, std::size_t{1} << 26);
  }

  struct Term {
    std::uint32_t coef;
    Dim factors[4];
    int count;
  };
  struct Size {
    std::vector<Term> terms;  // reduce_*: terms[0] the outputs, terms[1] the inputs; tensor_chunks: the numels
    std::int64_t constant = 0;
    SizeKind kind = SizeKind::products;
    std::uint64_t element_bytes = 0, tensors_per_layer = 0, tensors_fixed = 0;  // tensor_chunks
  };
  struct Token {
    TokenOp op;
    std::int32_t a[4];
  };
  struct Part {
    bool repeat = false;
    std::int64_t c = 0;
    std::vector<Token> tokens;
  };
  struct Block {
    BlockKind kind = BlockKind::sequence;
    int step = 0;
    ProgramPhase phase = ProgramPhase::build;
    std::vector<Part> parts;          // sequence
    bool down = false;                // layers
    std::int64_t lo = 0, hi = 0;
    std::vector<Token> layer_template;
    std::vector<std::vector<Token>> lo_special, hi_special;
  };

  static std::uint64_t product(const Term& t, const ProgramDims& d) {
    std::uint64_t v = t.coef;
    for (int f = 0; f < t.count; ++f) v = detail::checked_mul(v, d[t.factors[f]]);
    return v;
  }

  // 0: no request (a sum that is not split at these dimensions).
  static std::uint64_t evaluate(const Size& s, const ProgramDims& d, std::uint64_t layers) {
    switch (s.kind) {
      case SizeKind::tensor_chunks: {
        const std::uint64_t tensors = checked_add(checked_mul(s.tensors_per_layer, layers), s.tensors_fixed);
        if (s.terms.empty()) return checked_mul(s.element_bytes, tensors);  // one element a tensor
        std::uint64_t largest = 0;
        for (const Term& t : s.terms) largest = std::max(largest, product(t, d));
        return foreach_norm_partials_bytes(s.element_bytes, tensors, largest);
      }
      case SizeKind::flash_lse:
      case SizeKind::flash_out: {
        const FlashAccumulators f = flash_accumulator_bytes(d.batch, d.heads, d.seq, d.head_dim, d.multiprocessors);
        return s.kind == SizeKind::flash_lse ? f.lse : f.out;
      }
      case SizeKind::reduce_buffer:
      case SizeKind::reduce_semaphore: {
        const ReduceBytes r = reduce_sizes(product(s.terms[0], d), product(s.terms[1], d), d.multiprocessors,
                                           d.threads_per_multiprocessor);
        return s.kind == SizeKind::reduce_buffer ? r.buffer : r.semaphore;
      }
      case SizeKind::products: break;
    }
    std::uint64_t total = 0;
    for (const Term& t : s.terms) total = detail::checked_add(total, product(t, d));
    if (s.constant < 0) return detail::checked_sub(total, static_cast<std::uint64_t>(-s.constant));
    return detail::checked_add(total, static_cast<std::uint64_t>(s.constant));
  }

  // Keys of live requests: (type, block, part or -, repeat or layer, index).
  static std::uint64_t key(std::uint64_t type, std::uint64_t b, std::uint64_t part, std::uint64_t m, std::uint64_t k) {
    if (b >= 256 || part >= 256 || m >= (1u << 20) || k >= (1u << 24))
      throw InvalidInput("program", "a reference is out of range");
    return (type << 62) | (b << 54) | (part << 46) | (m << 24) | k;
  }

  // Resolves the tokens to requests and frees of slots (`ProgramOps`), as a run would meet them.
  struct Resolver {
    Resolver(const StepProgram& program, std::uint64_t l, const std::vector<std::uint64_t>* s)
        : p(program), L(l), sizes(s) {}
    const StepProgram& p;
    std::uint64_t L;
    const std::vector<std::uint64_t>* sizes;  // the current step's (a loop of varied lengths switches them)
    ProgramOps out;
    std::vector<std::uint64_t> slot_bytes;  // each request's bytes, by slot
    KeyMap<std::uint32_t> live;  // key -> slot
    KeyMap<bool> skipped;
    KeyMap<std::int64_t> counts;  // (block, part) -> repeats
    bool record_frees = false;  // during step 2: keep what it frees of the build's and step 1's
    std::vector<std::pair<std::uint64_t, std::uint64_t>> freed_before;  // (key, requested bytes)
    // A loop (`resolve_loop`): the build's live sequence-dependent requests (key, size index), made
    // again before each step; with `bound`, requests from the first sequence-dependent one on are
    // charged (`resolve_slack_bound`).
    bool loop = false, bound = false, charging = false;
    std::vector<std::pair<std::uint64_t, std::int32_t>> build_seq_requests;

    void emit(ProgramOps::Code code, std::uint32_t arg, std::uint64_t bytes = 0) {
      out.ops.push_back(ProgramOps::Op{code, arg, bytes});
    }
    std::uint32_t request(std::uint64_t key, std::uint64_t n, bool charged) {
      const auto slot = static_cast<std::uint32_t>(slot_bytes.size());
      slot_bytes.push_back(n);
      live.set(key, slot);
      emit(charged ? ProgramOps::Code::charged_request : ProgramOps::Code::request, slot, n);
      return slot;
    }

    // Before step 2's blocks run again: what step 2 left live, paired in key order with what step 2
    // freed of earlier steps (with `same_sizes`, of equal sizes; a loop's differ with the lengths),
    // to take their keys (`rename`) so the same tokens free it.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> step_renames(bool same_sizes) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> left;
      live.for_each([&](std::uint64_t k, std::uint32_t slot) {
        if (p.blocks_[(k >> 54) & 0xFF].step == 2) left.emplace_back(k, slot_bytes[slot]);
      });
      std::sort(left.begin(), left.end());
      std::sort(freed_before.begin(), freed_before.end());
      const auto drop_key = [](std::uint64_t k) { return k & ~(0xFFULL << 54); };
      if (left.size() != freed_before.size())
        throw InvalidInput("program", "step 2 does not free what it leaves; it cannot run again");
      std::vector<std::pair<std::uint64_t, std::uint64_t>> pairs;
      for (std::size_t i = 0; i < left.size(); ++i) {
        if ((same_sizes && left[i].second != freed_before[i].second) ||
            drop_key(left[i].first) != drop_key(freed_before[i].first))
          throw InvalidInput("program", "step 2 does not free what it leaves; it cannot run again");
        pairs.emplace_back(left[i].first, freed_before[i].first);
      }
      freed_before.clear();
      return pairs;
    }
    void rename(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& renames) {
      for (const auto& [from, to] : renames) {
        const std::uint32_t* slot = live.find(from);
        if (slot == nullptr) throw InvalidInput("program", "step 2 does not leave what it left before");
        const std::uint32_t s = *slot;
        live.erase(from);
        live.set(to, s);
      }
    }

    // Before a loop's next step: the build's sequence-dependent requests made again at the step's
    // sizes (in the order they were made) while the previous ones are held, then those freed.
    void new_batch() {
      emit(ProgramOps::Code::phase, static_cast<std::uint32_t>(ProgramPhase::forward));
      std::vector<std::uint32_t> old;
      for (const auto& [key, index] : build_seq_requests) {
        std::uint32_t* slot = live.find(key);
        if (slot == nullptr) continue;
        old.push_back(*slot);
        request(key, (*sizes)[static_cast<std::size_t>(index)], bound);
      }
      for (const std::uint32_t slot : old) emit(ProgramOps::Code::free, slot);
    }

    static std::uint64_t count_key(std::int64_t b, std::int64_t part) { return idx(b) * 256 + idx(part); }
    // The key of request k of the current unit: a literal part (type 0), repetition c of a
    // repeat (type 1) or layer c (type 2).
    static std::uint64_t unit_key(std::uint64_t type, std::int64_t b, std::int64_t part, std::int64_t c, std::int64_t k) {
      return key(type, idx(b), type == 2 ? 0 : idx(part), type == 0 ? 0 : idx(c), idx(k));
    }
    std::int64_t count_of(std::int64_t b, std::int64_t part) const {
      const std::int64_t* n = counts.find(count_key(b, part));
      if (n == nullptr) throw InvalidInput("program", "a reference names a repeat not run yet");
      return *n;
    }
    static std::uint64_t idx(std::int64_t v) {
      if (v < 0) throw InvalidInput("program", "a reference resolves to a negative index");
      return static_cast<std::uint64_t>(v);
    }
    // type: 0 literal part, 1 repeat, 2 layer
    std::uint64_t resolve(const Token& t, std::int64_t b, std::int64_t part, std::int64_t c, std::uint64_t unit_type) const {
      const auto* a = t.a;
      const std::int64_t Ls = static_cast<std::int64_t>(L);
      switch (t.op) {
        case TokenOp::self: return unit_key(unit_type, b, part, c, a[0]);
        case TokenOp::cand: return key(1, idx(b), idx(part), idx(c + a[0]), idx(a[1]));
        case TokenOp::rep: return key(1, idx(b), idx(a[0]), idx(c + a[1]), idx(a[2]));
        case TokenOp::rep_mirrored: return key(1, idx(b), idx(a[0]), idx(count_of(b, a[0]) - 1 - c + a[1]), idx(a[2]));
        case TokenOp::rel: return key(2, idx(a[0]), 0, idx(c + a[1]), idx(a[2]));
        case TokenOp::lsub: return key(0, idx(a[0]), idx(a[1]), 0, idx(a[2]));
        case TokenOp::xrep: return key(1, idx(a[0]), idx(a[1]), idx(c + a[2]), idx(a[3]));
        case TokenOp::xrep_absolute: return key(1, idx(a[0]), idx(a[1]), idx(a[2]), idx(a[3]));
        case TokenOp::xrep_from_end: return key(1, idx(a[0]), idx(a[1]), idx(count_of(a[0], a[1]) - a[2]), idx(a[3]));
        case TokenOp::layer_relative: return key(2, idx(a[0]), 0, idx(c + a[1]), idx(a[2]));
        case TokenOp::layer_mirrored: return key(2, idx(a[0]), 0, idx(Ls - 1 - c + a[1]), idx(a[2]));
        case TokenOp::layer_absolute: return key(2, idx(a[0]), 0, idx(a[1]), idx(a[2]));
        case TokenOp::layer_from_end: return key(2, idx(a[0]), 0, idx(Ls - a[1]), idx(a[2]));
        case TokenOp::request: break;
      }
      throw InvalidInput("program", "a request token in a free's place");
    }

    void tokens(const std::vector<Token>& ts, std::int64_t b, std::int64_t part, std::int64_t c, std::uint64_t unit_type) {
      std::int64_t k = 0;
      for (const Token& t : ts) {
        if (t.op == TokenOp::request) {
          if (t.a[0] < 0 || static_cast<std::size_t>(t.a[0]) >= sizes->size())
            throw InvalidInput("program", "size index out of range");
          const std::uint64_t n = (*sizes)[static_cast<std::size_t>(t.a[0])];
          const auto key = unit_key(unit_type, b, part, c, k++);
          if (n == 0) {  // not requested at these dimensions; its free is skipped too
            skipped.set(key, true);
            continue;
          }
          if (loop) {
            const bool by_seq = p.seq_dependent_[static_cast<std::size_t>(t.a[0])];
            if (by_seq && p.blocks_[static_cast<std::size_t>(b)].step == 0) build_seq_requests.emplace_back(key, t.a[0]);
            charging = charging || by_seq;
          }
          request(key, n, bound && charging);
        } else {
          const auto key = resolve(t, b, part, c, unit_type);
          const std::uint32_t* slot = live.find(key);
          if (slot == nullptr) {
            if (skipped.erase(key)) continue;
            throw InvalidInput("program", "a free names no live request");
          }
          if (record_frees && p.blocks_[(key >> 54) & 0xFF].step < 2)
            freed_before.emplace_back(key, slot_bytes[*slot]);
          emit(ProgramOps::Code::free, *slot);
          live.erase(key);
        }
      }
    }

    void block(std::size_t bi) {
      const Block& blk = p.blocks_[bi];
      const auto b = static_cast<std::int64_t>(bi);
      if (blk.kind == BlockKind::sequence) {
        for (std::size_t s = 0; s < blk.parts.size(); ++s) {
          const Part& part = blk.parts[s];
          const auto si = static_cast<std::int64_t>(s);
          if (!part.repeat) {
            tokens(part.tokens, b, si, 0, 0);
            continue;
          }
          const std::int64_t n = static_cast<std::int64_t>(L) - part.c;
          if (n < 0) throw InvalidInput("layers", "too few layers for this program");
          counts.set(count_key(b, si), n);
          for (std::int64_t m = 0; m < n; ++m) tokens(part.tokens, b, si, m, 1);
        }
        return;
      }
      const auto Ls = static_cast<std::int64_t>(L);
      if (blk.lo + blk.hi > Ls) throw InvalidInput("layers", "too few layers for this program");
      for (std::int64_t n = 0; n < Ls; ++n) {
        const std::int64_t j = blk.down ? Ls - 1 - n : n;
        const std::vector<Token>* ts = &blk.layer_template;
        if (j < blk.lo) ts = &blk.lo_special[static_cast<std::size_t>(j)];
        else if (j > Ls - 1 - blk.hi) ts = &blk.hi_special[static_cast<std::size_t>(Ls - 1 - j)];
        tokens(*ts, b, 0, j, 2);
      }
    }
  };

  void parse(std::span<const std::int32_t> f) {
    std::size_t at = 0;
    const auto next = [&]() -> std::int32_t {
      if (at >= f.size()) throw InvalidInput("program", "ends early");
      return f[at++];
    };
    const auto count = [&](std::int32_t limit) {
      const std::int32_t n = next();
      if (n < 0 || n > limit) throw InvalidInput("program", "a count is out of range");
      return static_cast<std::size_t>(n);
    };
    const auto tokens = [&] {
      std::vector<Token> ts(count(1 << 24));
      for (auto& t : ts) {
        t.op = program_enum<TokenOp>(next(), static_cast<std::int32_t>(EnumNames<TokenOp>::names.size()), "a token kind");
        for (auto& a : t.a) a = next();
      }
      return ts;
    };
    sizes_.resize(count(1 << 20));
    // A term's factor count, then four factor slots (-1: unused).
    const auto factors = [&](Term& t) {
      t.count = static_cast<int>(count(4));
      for (int k = 0; k < 4; ++k) {
        const std::int32_t x = next();
        t.factors[k] = k < t.count ? program_enum<Dim>(x, dim_count, "a size factor") : Dim::batch;
      }
    };
    for (auto& s : sizes_) {
      const std::int32_t n = next();
      if (n == static_cast<std::int32_t>(SizeKind::flash_lse) || n == static_cast<std::int32_t>(SizeKind::flash_out)) {
        s.kind = static_cast<SizeKind>(n);
        if (next() != 0) throw InvalidInput("program", "a flash accumulator's size has a constant");
        continue;
      }
      if (n == static_cast<std::int32_t>(SizeKind::tensor_chunks)) {
        s.kind = SizeKind::tensor_chunks;
        const std::int32_t element_bytes = next(), per_layer = next(), fixed = next();
        if (element_bytes < 1 || element_bytes > 8 || per_layer < 0 || per_layer > 4096 || fixed < 0 || fixed > 4096)
          throw InvalidInput("program", "a per-tensor size's counts are out of range");
        s.element_bytes = static_cast<std::uint64_t>(element_bytes);
        s.tensors_per_layer = static_cast<std::uint64_t>(per_layer);
        s.tensors_fixed = static_cast<std::uint64_t>(fixed);
        s.terms.resize(count(8));  // the tensors' element counts; the largest sets the chunks
        for (auto& t : s.terms) {
          t.coef = 1;
          factors(t);
        }
        if (next() != 0) throw InvalidInput("program", "a per-tensor size has a constant");
        continue;
      }
      if (n == static_cast<std::int32_t>(SizeKind::reduce_buffer) ||
          n == static_cast<std::int32_t>(SizeKind::reduce_semaphore)) {
        s.kind = static_cast<SizeKind>(n);
        s.terms.resize(2);  // the outputs' product, then the inputs'
        for (auto& t : s.terms) {
          t.coef = 1;
          factors(t);
        }
        if (next() != 0) throw InvalidInput("program", "a reduction's size has a constant");
        continue;
      }
      if (n < 0 || n > 8) throw InvalidInput("program", "a count is out of range");
      s.terms.resize(static_cast<std::size_t>(n));
      for (auto& t : s.terms) {
        const std::int32_t coef = next();
        if (coef <= 0) throw InvalidInput("program", "a size coefficient must be positive");
        t.coef = static_cast<std::uint32_t>(coef);
        factors(t);
      }
      s.constant = next();
    }
    blocks_.resize(count(255));
    for (auto& b : blocks_) {
      b.kind = program_enum<BlockKind>(next(), 2, "a block kind");
      b.step = next();
      if (b.step < 0 || b.step > 2 || (&b != blocks_.data() && b.step < (&b - 1)->step))
        throw InvalidInput("program", "a block's step must be 0 to 2, in order");
      b.phase = program_enum<ProgramPhase>(next(), static_cast<std::int32_t>(EnumNames<ProgramPhase>::names.size()),
                                           "a block phase");
      if (b.kind == BlockKind::sequence) {
        b.parts.resize(count(255));
        for (auto& part : b.parts) {
          part.repeat = next() != 0;
          part.c = next();
          part.tokens = tokens();
        }
      } else {
        b.down = next() != 0;
        b.lo = next();
        b.hi = next();
        if (b.lo < 0 || b.hi < 0) throw InvalidInput("program", "negative special-layer count");
        b.layer_template = tokens();
        for (std::int64_t j = 0; j < b.lo; ++j) b.lo_special.push_back(tokens());
        for (std::int64_t k = 0; k < b.hi; ++k) b.hi_special.push_back(tokens());
      }
    }
    if (at != f.size()) throw InvalidInput("program", "has trailing data");
    for (const Size& z : sizes_) {
      bool by_seq = z.kind == SizeKind::flash_lse || z.kind == SizeKind::flash_out;
      for (const Term& t : z.terms)
        for (int k = 0; k < t.count; ++k)
          by_seq = by_seq || t.factors[k] == Dim::seq || t.factors[k] == Dim::seq_plus_one ||
                   t.factors[k] == Dim::seq_padded_128 || t.factors[k] == Dim::seq_minus_one;
      seq_dependent_.push_back(by_seq);
    }
  }

  std::vector<Size> sizes_;
  std::vector<bool> seq_dependent_;  // per size: it changes with the sequence length
  std::vector<Block> blocks_;
};

}  // namespace vramfit::detail
