#pragma once
/// @file sharding.hpp
/// Rank 0's bytes of weights, adapters, grads, AdamW state and engine buffers under data
/// parallelism (DDP, ZeRO-1/2 with DeepSpeed's buffers, FSDP2 full and hybrid sharding), for
/// `ParameterTerm` on every step that is not one process on one GPU. Activations and logits are
/// per rank already. Read from the PyTorch and DeepSpeed sources, not yet measured on several GPUs;
/// what each strategy adds and from which function: tests/validation/README.md#sharding-model

#include <cstdint>
#include <string>
#include <string_view>

#include "vramfit/bytes.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/step.hpp"

namespace vramfit {

/// DeepSpeed ZeRO defaults behind zero1 and zero2 (deepspeed/runtime/zero/config.py).
struct DeepSpeedZeroBuffers {
  /// `reduce_bucket_size`: elements of the contiguous gradient bucket (5e8: 1 GB in bf16, 2 GB
  /// for fp32 LoRA adapters). Hugging Face's "auto" DeepSpeed configs set hidden x hidden
  /// instead: this model then over-predicts by the difference.
  static constexpr std::uint64_t reduce_bucket_elements = 500000000;
};

namespace detail {

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/// One parameter tensor as FSDP2 shards it: dim 0 (rows) and the elements of one row.
struct ParameterTensor {
  bool root;       ///< embedding, final norm, lm_head; else one decoder layer's
  bool adapter;    ///< a LoRA lora_A or lora_B weight
  bool trainable;  ///< gets a grad and optimizer state
  std::uint64_t element_bytes;
  std::uint64_t rows;
  std::uint64_t row_elements;
};

/// Calls `f` on every parameter tensor of the root and of ONE decoder layer (all layers are
/// alike). Shapes as torch stores them: a Linear's weight is (out, in), a LoRA lora_A is
/// (r, in) and lora_B (out, r).
/// @param e bytes per weight element; @param a bytes per adapter element
template <class F>
constexpr void for_each_parameter_tensor(const ModelShape& m, const Step& s, std::uint64_t e, std::uint64_t a, F&& f) {
  const bool full = s.mode == Mode::full;
  f(ParameterTensor{true, false, full, e, m.vocab, m.hidden});             // embedding (tied: also lm_head)
  if (!m.tied_embeddings) f(ParameterTensor{true, false, full, e, m.vocab, m.hidden});  // lm_head
  f(ParameterTensor{true, false, full, e, m.hidden, 1});                   // final norm
  for (Module mod : all_modules) {
    if (!m.has(mod)) continue;
    const ModuleDims d = m.dims(mod);
    f(ParameterTensor{false, false, full, e, d.out, d.in});
    if (m.qkv_bias && (mod == Module::q_proj || mod == Module::k_proj || mod == Module::v_proj))
      f(ParameterTensor{false, false, full, e, d.out, 1});
    if (s.adapted(mod)) {
      f(ParameterTensor{false, true, true, a, s.lora.rank, d.in});   // lora_A
      f(ParameterTensor{false, true, true, a, d.out, s.lora.rank});  // lora_B
    }
  }
  f(ParameterTensor{false, false, full, e, m.hidden, 1});  // input_layernorm
  f(ParameterTensor{false, false, full, e, m.hidden, 1});  // post_attention_layernorm
  if (m.qk_norm) {
    f(ParameterTensor{false, false, full, e, m.head_dimension(), 1});  // q_norm
    f(ParameterTensor{false, false, full, e, m.head_dimension(), 1});  // k_norm
  }
}

/// Bytes of a set of tensors: whole, as rank 0's shard (ceil(rows / S) rows each) and as FSDP2
/// gathers them (S x the shard: the padded unsharded storage).
struct TensorBytes {
  Bytes whole, shard, gathered;
  constexpr void add(const ParameterTensor& t, std::uint64_t shards) {
    const std::uint64_t row = checked_mul(t.element_bytes, t.row_elements);
    whole += bytes_of(row, {t.rows});
    const Bytes one = bytes_of(row, {ceil_div(t.rows, shards)});
    shard += one;
    gathered += one * shards;
  }
};

/// The model's parameters summed the ways the strategies need them, for S shards.
struct ParameterSums {
  TensorBytes root, root_trainable, layer, layer_trainable;
  Bytes weights;                  ///< base weights, whole (embedding, layers, norms, lm_head)
  Bytes adapters;                 ///< LoRA adapters of every layer, whole
  std::uint64_t trainable_elements = 0;
  Bytes largest_trainable;        ///< the largest trainable tensor, whole
  Bytes largest_trainable_shard;  ///< the largest trainable tensor's shard (FSDP2)
  std::uint64_t largest_trainable_elements = 0;
};

constexpr ParameterSums parameter_sums(const ModelShape& m, const Step& s, std::uint64_t e, std::uint64_t a,
                                       std::uint64_t shards) {
  ParameterSums out;
  for_each_parameter_tensor(m, s, e, a, [&](const ParameterTensor& t) {
    const std::uint64_t copies = t.root ? 1 : m.layers;
    const std::uint64_t elements = checked_mul(t.rows, t.row_elements);
    const Bytes whole = bytes_of(t.element_bytes, {elements, copies});
    (t.root ? out.root : out.layer).add(t, shards);
    (t.adapter ? out.adapters : out.weights) += whole;
    if (!t.trainable) return;
    (t.root ? out.root_trainable : out.layer_trainable).add(t, shards);
    out.trainable_elements = checked_add(out.trainable_elements, checked_mul(elements, copies));
    const Bytes one = bytes_of(t.element_bytes, {elements});
    if (one > out.largest_trainable) {
      out.largest_trainable = one;
      out.largest_trainable_elements = elements;
    }
    out.largest_trainable_shard =
        max(out.largest_trainable_shard, bytes_of(t.element_bytes, {ceil_div(t.rows, shards), t.row_elements}));
  });
  return out;
}

/// What `ParameterTerm` knows of its stack profile.
struct StackParameterFigures {
  std::uint64_t element_bytes;  ///< weights and activations
  std::uint64_t adapter_bytes;  ///< LoRA adapters
  AdamWTemporaries adamw;
};

/**
 * Rank 0's bytes of weights, adapters, grads, moments, AdamW temporaries and the strategy's
 * buffers at every phase, S = `Step::shard_count()`. With S = 1 the state is the single-GPU
 * `ParameterTerm`'s exactly and only the strategy's buffers remain.
 */
constexpr PhaseBytes sharded_parameter_bytes(const ModelShape& m, const Step& s, const StackParameterFigures& stack) {
  const std::uint64_t S = s.shard_count();
  const bool full = s.mode == Mode::full;
  const bool steady = s.peak_over == PeakOver::steady;
  const bool foreach_group = stack.adamw == AdamWTemporaries::foreach_group;
  const ParameterSums p = parameter_sums(m, s, stack.element_bytes, stack.adapter_bytes, S);
  const std::uint64_t g = full ? stack.element_bytes : stack.adapter_bytes;  // bytes per trainable element
  const Bytes weights = p.weights + p.adapters;                              // every parameter, whole
  const Bytes trainable = p.root_trainable.whole + p.layer_trainable.whole * m.layers;
  // Grads at the top of the backward: lm_head (or the tied embedding) and the final norm, then
  // the last layer's; a tied embedding's second grad arrives as a new tensor, then is added.
  const Bytes head_grads = full ? bytes_of(stack.element_bytes, {checked_add(m.embedding_parameters(), m.hidden)})
                                : Bytes{};
  const Bytes top_grads = head_grads + p.layer_trainable.whole;
  const Bytes tied_extra = (full && m.tied_embeddings) ? bytes_of(stack.element_bytes, {m.embedding_parameters()})
                                                       : Bytes{};

  PhaseBytes out;
  switch (s.sharding) {
    case Sharding::none: {
      const Bytes moments = trainable * 2;
      const Bytes temporaries = foreach_group ? trainable : p.largest_trainable * 2;
      // DDP's bucket copy of the grads, from construction on (none of it with one rank: no DDP).
      const Bytes buckets = s.world_size > 1 ? trainable : Bytes{};
      const Bytes persistent = weights + (steady ? moments : Bytes{}) + buckets;
      out[Phase::forward] = persistent;
      out[Phase::loss_backward] = persistent;
      out[Phase::backward_top] = persistent + top_grads;
      out[Phase::backward_bottom] = persistent + trainable + tied_extra;
      out[Phase::optimizer_step] = weights + trainable + moments + temporaries + buckets;
      return out;
    }
    case Sharding::zero1:
    case Sharding::zero2: {
      const std::uint64_t partition = S == 1 ? p.trainable_elements : 2 * ceil_div(p.trainable_elements, 2 * S);
      const Bytes grads = bytes_of(g, {partition});
      const Bytes moments = grads * 2;
      const Bytes temporaries =
          foreach_group ? grads
                        : bytes_of(2 * g, {p.largest_trainable_elements < partition ? p.largest_trainable_elements : partition});
      const Bytes bucket = bytes_of(g, {DeepSpeedZeroBuffers::reduce_bucket_elements});
      const Bytes persistent = weights + (steady ? moments : Bytes{});
      const Bytes backward_grads = s.sharding == Sharding::zero1 ? trainable : grads;
      out[Phase::forward] = persistent;
      out[Phase::loss_backward] = persistent + bucket;
      out[Phase::backward_top] = persistent + top_grads + bucket;
      out[Phase::backward_bottom] = persistent + backward_grads + tied_extra + bucket + p.largest_trainable;
      out[Phase::optimizer_step] = weights + grads + moments + temporaries;
      return out;
    }
    case Sharding::full:
    case Sharding::hybrid: {
      const std::uint64_t L = m.layers;
      const bool gathers = S > 1;  // with S = 1 FSDP2 copies instead of all-gathering
      const Bytes root = p.root.gathered;    // R: the root's unsharded parameters
      const Bytes layer = p.layer.gathered;  // Lp: one layer's unsharded parameters
      const Bytes root_output = gathers ? root : Bytes{};    // an all-gather output of the root
      const Bytes layer_output = gathers ? layer : Bytes{};  // an all-gather output of a layer
      const Bytes layer_grads = p.layer_trainable.whole;           // Lg, as autograd makes them
      const Bytes layer_reduce = p.layer_trainable.gathered;       // a layer's reduce_scatter_input
      const Bytes layer_grads_shard = p.layer_trainable.shard;     // a layer's sharded grads
      const Bytes root_grads = p.root_trainable.whole;             // lm_head, final norm, embedding
      const Bytes root_reduce = p.root_trainable.gathered;
      const Bytes grads = p.root_trainable.shard + layer_grads_shard * L;  // every grad, sharded
      const Bytes moments = grads * 2;
      const Bytes temporaries = foreach_group ? grads : p.largest_trainable_shard * 2;
      const Bytes persistent = p.root.shard + p.layer.shard * L + (steady ? moments : Bytes{});
      // The layer above's reduce-scatter input, still held, and its new sharded grads.
      const Bytes held_above = L >= 2 ? layer_reduce + layer_grads_shard : Bytes{};
      const Bytes prefetched = L >= 2 ? layer_output : Bytes{};  // the next layer's all-gather, in the backward

      // Forward: each layer's all-gather output is held until the next layer copies out, the
      // last one until the root's post-forward, after the loss (HF computes it inside the root's
      // forward); a layer's copy-out holds its output and its unsharded copy. Charged at the
      // forward's phase, whose end holds more activations than any layer's copy-out.
      out[Phase::forward] = persistent + root + layer_output + layer;
      // The root's pre-backward (a hook on the loss) prefetches the last layer.
      out[Phase::loss_backward] = persistent + root + layer_output;
      // The last layer: its copy-out (all-gather output and unsharded copy), or its compute
      // with the next layer prefetched and its grads made; the layer just below the top also
      // holds the reduce-scatter input of the one above.
      out[Phase::backward_top] =
          persistent + root + layer + head_grads + max(layer_output, prefetched + layer_grads + held_above);
      // Layer 0 (copy-out or compute, the input of layer 1's reduce-scatter held); the
      // embedding's backward (every root grad unsharded, layer 0's reduce-scatter input held);
      // the root's own reduce-scatter in the final callback (the root resharded first).
      const Bytes held_one = L >= 2 ? layer_reduce : Bytes{};
      const Bytes layer_zero = root + layer + held_one + head_grads + layer_grads_shard * (L - 1) +
                               max(layer_grads, layer_output);
      const Bytes embedding = root + root_grads + tied_extra + layer_grads_shard * L + layer_reduce;
      const Bytes root_reduce_scatter = root_grads + root_reduce + layer_grads_shard * L;
      // And the forward's moment where layer 0 gathers while the root's all-gather output is
      // held: it has almost no activations, so it is charged here (tests/validation/README.md, FSDP2).
      const Bytes early_forward = root + root_output + layer_output;
      out[Phase::backward_bottom] =
          persistent + max(max(layer_zero, early_forward), max(embedding, root_reduce_scatter));
      out[Phase::optimizer_step] = p.root.shard + p.layer.shard * L + grads + moments + temporaries;
      return out;
    }
  }
  return out;
}

}  // namespace detail

/// What is not checked about a step on several ranks, in a clause; empty for one process on one
/// GPU. ZeRO-1/2 in bf16 or fp16: DeepSpeed's fp32 master copy (`single_partition_of_fp32_groups`)
/// is not counted (tests/validation/README.md#zero-1-and-zero-2-zero1-zero2).
inline std::string_view sharding_caveat(const Step& s) {
  if (s.single_gpu()) return "";
  if ((s.sharding == Sharding::zero1 || s.sharding == Sharding::zero2) && s.precision != Precision::fp32)
    return "several GPUs: read from the PyTorch and DeepSpeed sources, not validated on several GPUs; DeepSpeed's "
           "fp32 master copy is not counted, so not an upper bound for a DeepSpeed run";
  return "several GPUs: read from the PyTorch and DeepSpeed sources, not validated on several GPUs";
}

/// "full sharding over 8 ranks", "DDP over 4 ranks", "hybrid sharding (groups of 4) over 16
/// ranks", or "" for one process on one GPU.
inline std::string describe_sharding(const Step& s) {
  if (s.single_gpu()) return "";
  const std::string ranks = std::to_string(s.world_size) + (s.world_size == 1 ? " rank" : " ranks");
  switch (s.sharding) {
    case Sharding::none: return "DDP over " + ranks;
    case Sharding::zero1: return "ZeRO-1 over " + ranks;
    case Sharding::zero2: return "ZeRO-2 over " + ranks;
    case Sharding::full: return "full sharding over " + ranks;
    case Sharding::hybrid:
      return "hybrid sharding (groups of " + std::to_string(s.shard_group) + ") over " + ranks;
  }
  return "";
}

}  // namespace vramfit
