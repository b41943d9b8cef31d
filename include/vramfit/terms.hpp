#pragma once
/// @file terms.hpp
/// The cost terms: what each keeps live at every phase of a step; a `Predictor` adds them phase by
/// phase. Notation: T tokens, V vocab, h hidden, i intermediate, q/kv query/key widths, H heads,
/// r rank, e and a bytes per model and adapter element. Derivations and measured figures:
/// tests/validation/README.md#cost-terms

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/sharding.hpp"
#include "vramfit/step.hpp"

namespace vramfit {

/// A cost term: a name and the bytes it keeps live at each phase for a model and a step.
/// @tparam T the term type; `T::name` names it in breakdowns, `t(model, step)` prices it.
template <class T>
concept CostTerm = requires(const T& t, const ModelShape& m, const Step& s) {
  { T::name } -> std::convertible_to<std::string_view>;
  { t(m, s) } -> std::same_as<PhaseBytes>;
};

namespace detail {

/// Bytes per adapter element under profile P (the model dtype where P says 0).
template <StackProfile P>
constexpr std::uint64_t adapter_element_bytes(const Step& s) {
  return P::figures.adapter_bytes != 0 ? P::figures.adapter_bytes : element_bytes(s.precision);
}

/// Bytes per weight element: the weights' storage dtype (`Step::weight_precision`).
constexpr std::uint64_t weight_bytes(const Step& s) { return element_bytes(s.weight_precision()); }

/// Whether the forward runs under autocast: a profile that autocasts, at bf16 or fp16.
template <StackProfile P>
constexpr bool autocasts(const Step& s) {
  return P::figures.autocast && s.precision != Precision::fp32;
}

/// Bytes per element of the residual stream (embedding output, RMSNorms, residual adds): the
/// weights' dtype, which autocast leaves alone (fp32 under mixed precision), else the precision.
constexpr std::uint64_t residual_bytes(const Step& s) { return weight_bytes(s); }

/// Whether autocast casts each projection's input on its own: the residual stream is wider than
/// the compute dtype (fp32 weights under autocast), and autocast's cache keeps only leaf casts.
template <StackProfile P>
constexpr bool casts_each_input(const Step& s) {
  return autocasts<P>(s) && residual_bytes(s) != element_bytes(s.precision);
}

/// Per-token bytes that one RMSNorm saves for backward.
template <StackProfile P>
constexpr std::uint64_t norm_saved_per_token(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  if constexpr (P::figures.norm == NormSaves::fp32_upcast) {
    // fp32 copy and rsqrt; the pre-weight copy (in the residual's dtype) when the weight trains.
    return 4 * m.hidden + 4 + (s.mode == Mode::full ? residual_bytes(s) * m.hidden : 0);
  } else {
    return e * m.hidden + 4;  // input + fp32 inverse RMS
  }
}

/// A group of projections that read the same input tensor.
struct InputGroup {
  Module modules[3];
  int count;
  std::uint64_t width;  // d_in
  bool saved_elsewhere; // the input is already saved by another op (SDPA saves its output)
  bool residual;        // the input is a normed residual (its dtype), not a compute-dtype output
};

/// A list of tensors, each as bytes per token, so that a total and the allocator's slack bound
/// (which counts tensors one by one) read the same list. N bounds what the callers add.
template <std::size_t N>
struct PerTokenTensors {
  std::uint64_t per_token[N]{};  // only [0, count) is ever read
  std::size_t count = 0;
  constexpr void add(std::uint64_t bytes, std::uint64_t n = 1) {
    for (std::uint64_t k = 0; k < n; ++k) per_token[count++] = bytes;
  }
  [[nodiscard]] constexpr std::uint64_t total() const {
    std::uint64_t sum = 0;
    for (std::size_t k = 0; k < count; ++k) sum += per_token[k];
    return sum;
  }
};

/// The tensors one decoder layer saves for backward. At most 6 (norms) + 6 (q/k norms) + 5
/// (attention) + 3 (MLP) + 21 (adapters on all seven projections, with dropout: input copy, mask,
/// lora_A's output) = 41 tensors; full fine-tuning has no adapters and at most 6 projection inputs
/// (one per projection under mixed precision).
using SavedTensors = PerTokenTensors<48>;

/// The widest input (d_in) among the projections that carry an adapter; 0 for none.
constexpr std::uint64_t widest_adapted_input(const ModelShape& m, const Step& s) {
  std::uint64_t widest = 0;
  for (Module mod : all_modules)
    if (m.has(mod) && s.adapted(mod)) widest = std::max(widest, m.dims(mod).in);
  return widest;
}

/**
 * The tensors one decoder layer saves for backward, without checkpointing: two RMSNorms' saved
 * sets, SDPA's q, k, v, output and log-sum-exp, the MLP's gate/SiLU/up outputs, and each
 * projection input a trainable weight or an adapter keeps (a per-module fp32 copy under PEFT),
 * plus lora_A's outputs; with LoRA dropout, each adapter's dropped copy of its input and the
 * dropout's one-byte mask. Under autocast a trainable projection or an adapter saves autocast's
 * compute-dtype cast of its input, one per projection where the residual is wider (mixed
 * precision). Derivation: tests/validation/README.md#activations and #hf-trainer
 */
template <StackProfile P>
constexpr SavedTensors layer_saved_tensors(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  const std::uint64_t a = adapter_element_bytes<P>(s);
  const bool casts = a != e;
  const bool autocast = autocasts<P>(s);
  const bool each_input = casts_each_input<P>(s);
  const bool full = s.mode == Mode::full;
  SavedTensors t;
  for (int norm = 0; norm < 2; ++norm) {
    if constexpr (P::figures.norm == NormSaves::fp32_upcast) {
      t.add(4 * m.hidden);
      t.add(4);
      if (full) t.add(residual_bytes(s) * m.hidden);
    } else {
      t.add(e * m.hidden);
      t.add(4);
    }
  }
  t.add(e * m.q_width());
  t.add(e * m.kv_width());
  t.add(e * m.kv_width());
  t.add(e * m.q_width());
  t.add(4 * m.heads);
  if (m.qk_norm) {
    // Qwen3's q_norm and k_norm: an RMSNorm over each head (Qwen3RMSNorm, LlamaRMSNorm's code), saving
    // its fp32 copy and an fp32 rsqrt per head; the pre-weight copy (q's dtype) when the weight trains.
    for (const auto& [width, heads] : {std::pair{m.q_width(), m.heads}, std::pair{m.kv_width(), m.kv_heads}}) {
      t.add(4 * width);
      t.add(4 * heads);
      if (full) t.add(e * width);
    }
  }
  for (int k = 0; k < (m.gated_mlp ? 3 : 1); ++k) t.add(e * m.intermediate);

  const InputGroup groups[] = {
      {{Module::q_proj, Module::k_proj, Module::v_proj}, 3, m.hidden, false, true},
      {{Module::o_proj}, 1, m.q_width(), true, false},
      {{Module::gate_proj, Module::up_proj}, 2, m.hidden, false, true},
      {{Module::down_proj}, 1, m.intermediate, false, false},
  };
  for (const auto& g : groups) {
    bool input_saved = g.saved_elsewhere;
    if (full && !input_saved) {
      // Mixed precision: autocast casts the fp32 normed input once per projection.
      for (int k = 0; k < (each_input && g.residual ? g.count : 1); ++k)
        if (k == 0 || m.has(g.modules[k])) t.add(e * g.width);
      input_saved = true;
    }
    for (int k = 0; k < g.count; ++k) {
      const Module mod = g.modules[k];
      if (!m.has(mod) || !s.adapted(mod)) continue;
      if (autocast) {
        // PEFT casts the input to the adapter's fp32, autocast casts that to the compute dtype for
        // lora_A, which saves it: a copy per adapter (dropout: its mask too), and lora_A's output.
        t.add(e * g.width);
        if (s.lora_dropout()) t.add(g.width);
        t.add(e * s.lora.rank);
        continue;
      }
      if (s.lora_dropout()) {
        // PEFT's lora.Linear: lora_A(dropout(x)). lora_A saves the dropped copy (its own, in the
        // adapter's dtype), nn.Dropout its bool mask (native_dropout's backward reads only that).
        t.add(a * g.width);
        t.add(g.width);
      } else if (casts) {
        t.add(a * g.width);
      } else if (!input_saved) {
        t.add(e * g.width);
        input_saved = true;
      }
      t.add(a * s.lora.rank);
    }
  }
  return t;
}

/// Per-token bytes one decoder layer saves for backward, without checkpointing.
template <StackProfile P>
constexpr std::uint64_t layer_saved_per_token(const ModelShape& m, const Step& s) {
  return layer_saved_tensors<P>(m, s).total();
}

/**
 * The transients of one decoder layer's backward under autocast, per token (each a tensor, so the
 * slack bound can count them): the residual's two grads, the larger of the MLP's and attention's
 * sets as without autocast, plus what the casts add. Mixed precision: each cast input's grad
 * converted to the residual's dtype and its sum (2 r h), and attention's q and k grads through the
 * fp32 rotary product (r (q + kv), twice). Adapters: lora_A's input grad in the compute dtype and
 * its fp32 conversion at the widest adapted input; with dropout a second adapter-dtype copy.
 * At most 2 + 13 (attention) + 2 + 3 = 20 tensors.
 */
using TransientTensors = PerTokenTensors<24>;
constexpr TransientTensors autocast_backward_transients(const ModelShape& m, const Step& s, std::uint64_t a) {
  const std::uint64_t e = element_bytes(s.precision);
  const std::uint64_t r = residual_bytes(s);
  TransientTensors mlp, attention, out;
  mlp.add(e * m.intermediate, m.gated_mlp ? 3 : 2);
  attention.add(e * m.q_width());
  attention.add(e * m.kv_width(), 2);
  attention.add(4 * m.q_width());
  attention.add(4 * m.heads);
  if (m.kv_heads != m.heads) attention.add(e * m.q_width(), 2);
  if (m.qk_norm) {
    attention.add(4 * m.q_width());
    attention.add(4 * m.kv_width());
  }
  if (r != e) {
    attention.add(checked_mul(r, m.q_width()), 2);
    attention.add(checked_mul(r, m.kv_width()), 2);
  }
  out.add(checked_mul(r, m.hidden), 2);
  const TransientTensors& larger = mlp.total() > attention.total() ? mlp : attention;
  for (std::size_t k = 0; k < larger.count; ++k) out.add(larger.per_token[k]);
  if (r != e) out.add(checked_mul(r, m.hidden), 2);
  if (const std::uint64_t widest = widest_adapted_input(m, s); widest != 0) {
    out.add(e * widest);
    out.add(a * widest);
    if (s.lora_dropout()) out.add(a * widest);
  }
  return out;
}
constexpr std::uint64_t autocast_backward_transient_per_token(const ModelShape& m, const Step& s, std::uint64_t a) {
  return autocast_backward_transients(m, s, a).total();
}

/**
 * Per-token bytes of the transients of one decoder layer's backward, on top of its saved
 * tensors: the hidden state's two grads (2 e h) and the larger of the MLP's grads and flash
 * attention's dq/dk/dv with their fp32 accumulators.
 */
template <StackProfile P>
constexpr std::uint64_t layer_backward_transient_per_token(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  const std::uint64_t a = adapter_element_bytes<P>(s);
  if (autocasts<P>(s)) return autocast_backward_transient_per_token(m, s, a);
  std::uint64_t mlp = (m.gated_mlp ? 3 : 2) * e * m.intermediate;
  if (s.adapted(Module::down_proj) && a != e) mlp += (a + e) * m.intermediate;
  std::uint64_t attention = e * (m.q_width() + 2 * m.kv_width()) + 4 * m.q_width() + 4 * m.heads;
  if (m.kv_heads != m.heads) attention += 2 * e * m.q_width();
  // q/k norms: their backward's fp32 grads of q and k.
  if (m.qk_norm) attention += 4 * (m.q_width() + m.kv_width());
  // With LoRA dropout, dropout's backward (grad x mask / (1 - p)) is a second adapter-dtype copy of
  // an adapted projection's input grad beside lora_A's: the widest such input, on top.
  const std::uint64_t dropout = s.lora_dropout() ? a * widest_adapted_input(m, s) : 0;
  return 2 * e * m.hidden + (mlp > attention ? mlp : attention) + dropout;
}

/// What the decoder layers keep live at the forward's end and at the backward of the last and the
/// first layer. Without checkpointing every layer's saved set; with it, each layer's input, plus
/// one layer's saved set once the backward recomputes it.
struct LayerStack {
  Bytes forward;
  Bytes top;
  Bytes bottom;
};

/// The stack of `layers` layers that each save `layer` (or only `input` under checkpointing).
constexpr LayerStack layer_stack(Bytes layer, Bytes input, std::uint64_t layers, bool checkpointing) {
  if (!checkpointing) return {layer * layers, layer * layers, layer};
  return {input * layers, input * layers + layer, input + layer};
}

/**
 * Bytes the CUDA caching allocator counts as allocated for a tensor of `bytes`, beyond `bytes`, in
 * a steady step: 512 B rounding, and a segment remainder of 1 MiB or less handed over unsplit
 * (c10's `should_split`). Rules: tests/validation/README.md#allocator-slack
 */
constexpr std::uint64_t block_slack(std::uint64_t bytes) {
  constexpr std::uint64_t mib = 1ULL << 20;
  const std::uint64_t rounded = checked_add(bytes, 511) / 512 * 512;
  std::uint64_t slack = rounded - bytes;
  if (rounded < mib) return slack;
  if (rounded < 10 * mib) {
    const std::uint64_t per_segment = (20 * mib) / rounded;
    const std::uint64_t rest = 20 * mib - per_segment * rounded;
    return slack + (rest <= mib ? (rest + per_segment - 1) / per_segment : 0);
  }
  const std::uint64_t rest = (2 * mib - rounded % (2 * mib)) % (2 * mib);  // up to the next multiple of 2 MiB
  return slack + (rest <= mib ? rest : 0);
}

/**
 * The most the caching allocator can count as allocated for a tensor of `bytes`, beyond `bytes`,
 * whatever blocks it holds: the 512 B rounding (`round_size`), and for the large pool (over
 * kSmallSize = 1 MiB) a remainder of up to 1 MiB handed over unsplit (`should_split` splits a
 * large block only when more than 1 MiB would remain; a small block whenever 512 B would, so
 * exactly). Rules: tests/validation/README.md#closed-form-as-an-upper-bound
 */
constexpr std::uint64_t block_slack_bound(std::uint64_t bytes) {
  constexpr std::uint64_t mib = 1ULL << 20;
  const std::uint64_t rounded = bytes < 512 ? 512 : checked_add(bytes, 511) / 512 * 512;
  return rounded - bytes + (rounded > mib ? mib : 0);
}

/// The sum of `block_slack_bound` over `count` tensors of `bytes` each.
constexpr Bytes blocks_slack_bound(std::uint64_t bytes, std::uint64_t count = 1) {
  return Bytes(checked_mul(block_slack_bound(bytes), count));
}

/// Bytes of the (batch x heads x seq x seq) score matrix the math backend builds, per byte of
/// element: the caller multiplies by bytes per score.
constexpr Bytes score_elements(const ModelShape& m, const Step& s) {
  return bytes_of(1, {s.batch, m.heads, s.seq, s.seq});
}

/// The token buffers of a step on the GPU: the profile's per token (ids, labels and their copies),
/// and with gradient accumulation every other micro-batch's int64 ids and labels, which the
/// Trainer fetches for the whole step before its first micro-batch (`get_batch_samples`).
template <StackProfile P>
constexpr Bytes token_buffers(const Step& s) {
  const std::uint64_t others = s.grad_accum > 1 ? s.grad_accum - 1 : 0;
  return bytes_of(P::figures.token_buffer_bytes, {s.tokens()}) + bytes_of(2 * 8, {s.tokens(), others});
}


/// The trainable tensors of a step, as the optimizers size their state and temporaries.
struct TrainableTensors {
  std::uint64_t count = 0;    ///< tensors
  std::uint64_t largest = 0;  ///< elements of the largest
  /// Adafactor's second-moment elements: a row and a column vector per matrix, the whole of a vector.
  std::uint64_t factored = 0;
  std::uint64_t longest = 0;  ///< the longest of those vectors
};
constexpr TrainableTensors trainable_tensors(const ModelShape& m, const Step& s) {
  TrainableTensors t;
  for_each_parameter_tensor(m, s, 1, 1, [&](const ParameterTensor& p) {
    if (!p.trainable) return;
    const std::uint64_t copies = p.root ? 1 : m.layers;
    t.count = checked_add(t.count, copies);
    t.largest = std::max(t.largest, checked_mul(p.rows, p.row_elements));
    const std::uint64_t factored = p.row_elements == 1 ? p.rows : checked_add(p.rows, p.row_elements);
    t.longest = std::max({t.longest, p.rows, p.row_elements});
    t.factored = checked_add(t.factored, checked_mul(factored, copies));
  });
  return t;
}

/// Throws `InvalidInput` for the Trainer's settings on a stack that is not the Trainer's
/// (`stack`, its name): gradient accumulation and mixed precision (fp32 weights under autocast).
constexpr void require_no_trainer_settings(const Step& s, std::string_view stack) {
  if (s.grad_accum != 1)
    throw InvalidInput("grad accum", "gradient accumulation is modelled for the Trainer's step (stack hf-trainer), "
                                     "not " + std::string(stack));
  if (s.mixed_precision())
    throw InvalidInput("weights", "fp32 weights under autocast are the Trainer's mixed precision (stack hf-trainer); " +
                                      std::string(stack) + " runs weights in the step's precision");
}

/// Adapter parameters (lora_A: r x d_in, lora_B: d_out x r) over all layers; 0 without LoRA.
constexpr std::uint64_t adapter_parameter_count(const ModelShape& m, const Step& s) {
  if (s.mode != Mode::lora) return 0;
  std::uint64_t n = 0;
  for (Module mod : all_modules)
    if (m.has(mod) && s.adapted(mod))
      n = checked_add(n, checked_mul(s.lora.rank, checked_add(m.dims(mod).in, m.dims(mod).out)));
  return checked_mul(n, m.layers);
}

/// What an optimizer keeps from its first step on (`state`) and adds during its update.
struct OptimizerBytes {
  Bytes state;
  Bytes temporaries;
};
/**
 * The optimizer's state and temporaries, for `trainable` bytes of `g` bytes per element:
 * - AdamW: two moments in the parameter's dtype; foreach: temporaries the size of the trainable
 *   parameters (`exp_avg_sq.sqrt()` and the update, per group), per tensor: two of the largest;
 *   fused: none (one in-place kernel) but a 4-byte step count per tensor on the GPU.
 * - Adafactor (transformers' `Adafactor`, no first moment): fp32 row and column means per
 *   matrix (the whole square for a vector); tensor by tensor an fp32 copy of the grad and of the
 *   weight where they are narrower, then two fp32 tensors of its size at once (`grad**2` and
 *   `+ eps`; the old and the new `update` at `_approx_sq_grad`; `update` and `-update`): four
 *   fp32 tensors of the largest, two for fp32 weights.
 * - SGD: the momentum buffer or none; foreach with weight decay adds the grads' size (`_foreach_add`).
 * Sources: tests/validation/README.md#optimizers
 */
template <StackProfile P>
constexpr OptimizerBytes optimizer_bytes(const Step& s, const TrainableTensors& t, std::uint64_t g, Bytes trainable) {
  switch (s.optimizer) {
    case Optimizer::adamw:
      return {trainable * 2, P::figures.adamw == AdamWTemporaries::foreach_group ? trainable : bytes_of(g, {t.largest, 2})};
    case Optimizer::adamw_fused: return {trainable * 2 + bytes_of(4, {t.count}), Bytes{}};
    case Optimizer::adafactor: return {bytes_of(4, {t.factored}), bytes_of(g == 4 ? 8 : 16, {t.largest})};
    case Optimizer::sgd_momentum: return {trainable, trainable};
    case Optimizer::sgd: return {Bytes{}, trainable};
  }
  return {};
}

/// Autocast's copies of fp32 weights in the compute dtype, live at each phase before the
/// optimizer (mixed precision): trainable leaves are cast once and cached for the forward
/// (`cached_cast`), frozen ones at each call; either way a matmul that needs the weight for its
/// input's grad saves the copy until its backward. Checkpointing saves none in the forward but
/// lm_head's (not checkpointed) and keeps the one layer it recomputes. fp32 adapters' copies are
/// cached likewise under any autocast.
struct AutocastCopies {
  Bytes forward, loss_backward, backward_top, backward_bottom;
};
template <StackProfile P>
constexpr AutocastCopies autocast_copies(const ModelShape& m, const Step& s) {
  AutocastCopies out;
  if (!autocasts<P>(s)) return out;
  const std::uint64_t e = element_bytes(s.precision);
  if (s.mode == Mode::lora && adapter_element_bytes<P>(s) != e) {
    const Bytes adapters = bytes_of(e, {adapter_parameter_count(m, s)});
    out = {adapters, adapters, adapters, adapters};
  }
  if (weight_bytes(s) == e) return out;
  std::uint64_t layer = 0, largest = 0;
  for (Module mod : all_modules)
    if (m.has(mod)) {
      layer = checked_add(layer, checked_mul(m.dims(mod).in, m.dims(mod).out));
      largest = std::max(largest, checked_mul(m.dims(mod).in, m.dims(mod).out));
    }
  if (m.qkv_bias) layer = checked_add(layer, checked_add(m.q_width(), checked_mul(2, m.kv_width())));
  const Bytes one_layer = bytes_of(e, {layer});
  const Bytes all_layers = bytes_of(e, {layer, m.layers});
  const Bytes head = bytes_of(e, {m.embedding_parameters()});
  // Frozen weights under checkpointing: the forward's casts are transient, the largest at a time.
  const Bytes transient = s.mode == Mode::lora ? bytes_of(e, {largest}) : Bytes{};
  const bool ckpt = s.gradient_checkpointing;
  out.forward += ckpt && s.mode == Mode::lora ? head + transient : all_layers + head;
  out.loss_backward += ckpt ? head : all_layers + head;
  out.backward_top += ckpt ? one_layer : all_layers;
  out.backward_bottom += one_layer;
  return out;
}
}  // namespace detail

/**
 * Saved activations of the decoder layers, the final norm, rotary tables and token buffers. With
 * gradient checkpointing each layer keeps its input (e h per token) and the backward recomputes
 * one layer at a time. The math backend adds 16 B per (seq x seq) score (measured on the H200,
 * tests/data/instruments.jsonl); the fused kernels are linear in sequence.
 * @tparam P the stack profile
 */
template <StackProfile P>
struct ActivationTerm {
  static constexpr std::string_view name = "activations";
  using profile = P;

  constexpr PhaseBytes operator()(const ModelShape& m, const Step& s) const {
    const std::uint64_t e = element_bytes(s.precision);
    const std::uint64_t T = s.tokens();
    const bool full = s.mode == Mode::full;
    Bytes layer = bytes_of(detail::layer_saved_per_token<P>(m, s), {T});
    Bytes transient = bytes_of(detail::layer_backward_transient_per_token<P>(m, s), {T});
    if (s.attention == Attention::math) {
      layer += detail::score_elements(m, s) * 4;
      // 4 B per score saved, 12 more at the backward's peak.
      transient += detail::score_elements(m, s) * 12;
    }
    // Final norm, plus lm_head's input when lm_head trains.
    const Bytes head = bytes_of(detail::norm_saved_per_token<P>(m, s) + (full ? e * m.hidden : 0), {T});
    // int64 ids and labels; cos and sin tables (seq x head_dim each, the residual's dtype).
    const Bytes fixed = detail::token_buffers<P>(s) + bytes_of(2 * detail::residual_bytes(s), {s.seq, m.head_dimension()});
    // Full fine-tuning: the embedding's backward accumulates per token in fp32.
    const Bytes embedding_backward = full ? bytes_of(4 * m.hidden, {T}) : Bytes{};

    const detail::LayerStack stack =
        detail::layer_stack(layer, bytes_of(detail::residual_bytes(s) * m.hidden, {T}), m.layers, s.gradient_checkpointing);
    PhaseBytes out;
    out[Phase::forward] = stack.forward + head + fixed;
    out[Phase::loss_backward] = stack.forward + head + fixed;
    out[Phase::backward_top] = stack.top + transient + fixed;
    out[Phase::backward_bottom] = stack.bottom + transient + fixed + embedding_backward;
    return out;
  }
};

/**
 * The logits and the loss, T x V elements: logits, fp32 copy and log-softmax in the forward;
 * at the backward of log-softmax its output and two grads in the loss dtype (12 B per element
 * with the fp32 upcast, 6 without, as measured on the H200), plus the logits when the caller
 * keeps them. Derivation: tests/validation/README.md#logits-and-loss
 * @tparam P the stack profile
 */
template <StackProfile P>
struct LogitsTerm {
  static constexpr std::string_view name = "logits";
  using profile = P;

  /// Bytes per logits element at each phase, for a step.
  static constexpr PhaseBytes per_element(const Step& s) {
    const std::uint64_t e = element_bytes(s.precision);
    const std::uint64_t loss = (P::figures.loss_upcast || e == 4) ? 4 : e;
    const std::uint64_t copy = (P::figures.loss_upcast && e != 4) ? 4 : 0;
    const std::uint64_t kept = s.logits_retained ? e : 0;
    PhaseBytes b;
    b[Phase::forward] = Bytes(e + copy + loss);
    b[Phase::loss_backward] = Bytes(3 * loss + kept);
    b[Phase::backward_top] = Bytes(kept);
    b[Phase::backward_bottom] = Bytes(kept);
    b[Phase::optimizer_step] = Bytes(kept);
    return b;
  }

  constexpr PhaseBytes operator()(const ModelShape& m, const Step& s) const {
    const std::uint64_t elements = detail::checked_mul(s.tokens(), m.vocab);
    PhaseBytes out = per_element(s);
    for (auto& b : out.at) b = b * elements;
    return out;
  }
};

/**
 * Weights, LoRA adapters, grads, the optimizer's state (`detail::optimizer_bytes`: AdamW's two
 * moments, Adafactor's factored ones, SGD's buffer) and the update's temporaries; under autocast
 * its weight copies (`detail::autocast_copies`); with gradient accumulation the grads held through
 * the next micro-batch. Grads appear during the backward; the state exists from the first
 * optimizer step on (`PeakOver::steady`). On several ranks: rank 0's (sharding.hpp), AdamW's state
 * counted for every optimizer (a bound for fused AdamW and SGD). A stack whose profile does not
 * autocast refuses accumulation and mixed precision (`InvalidInput`), which only the Trainer runs.
 * @tparam P the stack profile
 */
template <StackProfile P>
struct ParameterTerm {
  static constexpr std::string_view name = "parameters";
  using profile = P;

  /// Adapter parameters (lora_A: r x d_in, lora_B: d_out x r) over all layers.
  static constexpr std::uint64_t adapter_parameters(const ModelShape& m, const Step& s) {
    return detail::adapter_parameter_count(m, s);
  }

  constexpr PhaseBytes operator()(const ModelShape& m, const Step& s) const {
    const std::uint64_t e = element_bytes(s.precision);
    const std::uint64_t w = detail::weight_bytes(s);
    const std::uint64_t a = detail::adapter_element_bytes<P>(s);
    if constexpr (!P::figures.autocast) detail::require_no_trainer_settings(s, P::name);
    if (!s.single_gpu()) return detail::sharded_parameter_bytes(m, s, {e, a, P::figures.adamw});
    const bool full = s.mode == Mode::full;
    const Bytes weights = bytes_of(w, {m.parameters()});
    const Bytes adapters = bytes_of(a, {adapter_parameters(m, s)});
    const Bytes trainable = full ? weights : adapters;
    const detail::TrainableTensors tensors = detail::trainable_tensors(m, s);
    const std::uint64_t g = full ? w : a;  // bytes per trainable element (grads and AdamW's moments)
    const detail::OptimizerBytes optimizer = detail::optimizer_bytes<P>(s, tensors, g, trainable);

    // Grads at the top of the layer backward: lm_head (or the tied embedding) and final norm,
    // plus the last layer's; for LoRA the last layer's adapters.
    const Bytes top_grads = full ? bytes_of(w, {detail::checked_add(m.embedding_parameters(), m.hidden)}) +
                                       bytes_of(w, {m.layer_parameters()})
                                 : Bytes(adapters.count() / m.layers);
    // A tied embedding gets its grad as a new tensor, then added into lm_head's.
    const Bytes tied_extra = (full && m.tied_embeddings) ? bytes_of(w, {m.embedding_parameters()}) : Bytes{};
    // Gradient accumulation: from the second micro-batch on the earlier grads are live through the
    // forward, and each new grad is a tensor of its own until AccumulateGrad adds it in place.
    const bool accumulates = s.grad_accum > 1;
    const Bytes held_grads = accumulates ? trainable : Bytes{};
    const Bytes new_grad = accumulates ? bytes_of(g, {tensors.largest}) : Bytes{};
    const detail::AutocastCopies copies = detail::autocast_copies<P>(m, s);

    const Bytes persistent = weights + adapters + (s.peak_over == PeakOver::steady ? optimizer.state : Bytes{});
    PhaseBytes out;
    out[Phase::forward] = persistent + held_grads + copies.forward;
    out[Phase::loss_backward] += persistent + held_grads + copies.loss_backward;
    out[Phase::backward_top] += persistent + held_grads + top_grads + new_grad + copies.backward_top;
    out[Phase::backward_bottom] += persistent + trainable + tied_extra + new_grad + copies.backward_bottom;
    // clip_grad_norm_: a 4-byte norm per tensor, their stack, the total; with fp16 the grad
    // scaler's scale and found_inf (0-d tensors).
    const Bytes scratch = P::figures.clips_grad_norm ? bytes_of(4, {detail::checked_add(tensors.count, 4), 2}) : Bytes{};
    out[Phase::optimizer_step] = weights + adapters + trainable + optimizer.state + optimizer.temporaries + scratch;
    return out;
  }
};

/**
 * The caching allocator's slack, bounded: what its rules let it count as allocated beyond what
 * the live tensors asked for, `detail::block_slack_bound` summed over every tensor live at each
 * phase (weights, adapters, grads, the optimizer's state and temporaries, saved activations, the backward's
 * transients, the loss's buffers), plus the autograd thread's cuBLASLt workspace, which a process
 * may hold and `WorkspaceTerm` leaves out. Makes the closed form an upper bound of the allocated peak.
 * @tparam P the stack profile
 */
template <StackProfile P>
struct AllocatorSlackTerm {
  static constexpr std::string_view name = "allocator slack";
  using profile = P;

  constexpr PhaseBytes operator()(const ModelShape& m, const Step& s) const {
    using detail::blocks_slack_bound;
    using detail::checked_add;
    using detail::checked_mul;
    const std::uint64_t e = element_bytes(s.precision);
    const std::uint64_t w = detail::weight_bytes(s);
    const std::uint64_t r = detail::residual_bytes(s);
    const std::uint64_t a = detail::adapter_element_bytes<P>(s);
    const std::uint64_t T = s.tokens();
    const bool full = s.mode == Mode::full;
    const bool autocast = detail::autocasts<P>(s);

    // Parameters: one tensor each. Per layer: projections, q/k/v biases, two norms.
    Bytes layer_weights, layer_adapters, layer_copies, largest_copy, adapter_copies;
    for (Module mod : all_modules) {
      if (!m.has(mod)) continue;
      const auto d = m.dims(mod);
      layer_weights += blocks_slack_bound(checked_mul(w, checked_mul(d.in, d.out)));
      layer_copies += blocks_slack_bound(checked_mul(e, checked_mul(d.in, d.out)));
      largest_copy = max(largest_copy, blocks_slack_bound(checked_mul(e, checked_mul(d.in, d.out))));
      if (!full && s.adapted(mod))
        adapter_copies += blocks_slack_bound(checked_mul(e, checked_mul(s.lora.rank, d.in))) +
                          blocks_slack_bound(checked_mul(e, checked_mul(s.lora.rank, d.out)));
      if (!full && s.adapted(mod))
        layer_adapters += blocks_slack_bound(checked_mul(a, checked_mul(s.lora.rank, d.in))) +
                          blocks_slack_bound(checked_mul(a, checked_mul(s.lora.rank, d.out)));
    }
    if (m.qkv_bias) {
      layer_weights += blocks_slack_bound(w * m.q_width()) + blocks_slack_bound(w * m.kv_width(), 2);
      layer_copies += blocks_slack_bound(e * m.q_width()) + blocks_slack_bound(e * m.kv_width(), 2);
    }
    layer_weights += blocks_slack_bound(w * m.hidden, 2);
    if (m.qk_norm) layer_weights += blocks_slack_bound(w * m.head_dimension(), 2);
    const Bytes head_weights = blocks_slack_bound(checked_mul(w, m.embedding_parameters()), m.tied_embeddings ? 1 : 2) +
                               blocks_slack_bound(w * m.hidden);
    const Bytes weights = layer_weights * m.layers + head_weights;
    const Bytes adapters = layer_adapters * m.layers;
    const Bytes trainable = full ? weights : adapters;  // a grad, a moment or a temporary per trainable tensor
    const Bytes top_grads = full ? head_weights + layer_weights : layer_adapters;
    const Bytes tied_extra =
        full && m.tied_embeddings ? blocks_slack_bound(checked_mul(w, m.embedding_parameters())) : Bytes{};
    const detail::TrainableTensors tensors = detail::trainable_tensors(m, s);
    const std::uint64_t g = full ? w : a;
    // The optimizer's state: a block per moment (AdamW), step count (fused) or Adafactor vector
    // (each under 1 MiB but for vocabularies past 262,144: 512 B of rounding, else the 1 MiB more).
    const Bytes small_block(512 + (checked_mul(4, tensors.longest) > (1ULL << 20) ? 1ULL << 20 : 0));
    Bytes moments;
    Bytes temporaries = trainable;
    switch (s.optimizer) {
      case Optimizer::adamw: moments = trainable * 2; break;
      case Optimizer::adamw_fused: moments = trainable * 2 + Bytes(checked_mul(512, tensors.count)); temporaries = Bytes{}; break;
      case Optimizer::adafactor:
        moments = small_block * checked_mul(2, tensors.count);
        temporaries = blocks_slack_bound(checked_mul(4, tensors.largest), g == 4 ? 2 : 4);
        break;
      case Optimizer::sgd_momentum: moments = trainable; break;
      case Optimizer::sgd: break;
    }
    if (P::figures.adamw == AdamWTemporaries::per_tensor && s.optimizer == Optimizer::adamw) {
      std::uint64_t largest = full ? checked_mul(w, m.largest_tensor()) : 0;
      for (Module mod : all_modules)
        if (!full && m.has(mod) && s.adapted(mod)) {
          const auto d = m.dims(mod);
          largest = std::max(largest, checked_mul(a, checked_mul(s.lora.rank, std::max(d.in, d.out))));
        }
      temporaries = blocks_slack_bound(largest, 2);
    }
    const Bytes persistent = weights + adapters + (s.peak_over == PeakOver::steady ? moments : Bytes{});

    // Activations: each saved tensor of a layer, the checkpointed inputs, the backward's transients.
    const detail::SavedTensors saved = detail::layer_saved_tensors<P>(m, s);
    Bytes layer;
    for (std::size_t k = 0; k < saved.count; ++k) layer += blocks_slack_bound(checked_mul(saved.per_token[k], T));
    Bytes transient_scores;
    if (s.attention == Attention::math) {
      const std::uint64_t scores = detail::score_elements(m, s).count();
      layer += blocks_slack_bound(checked_mul(4, scores));
      transient_scores = blocks_slack_bound(checked_mul(4, scores), 3);
    }
    const detail::LayerStack stack = detail::layer_stack(layer, blocks_slack_bound(checked_mul(r * m.hidden, T)),
                                                         m.layers, s.gradient_checkpointing);
    // The transients: the hidden state's two grads and the larger set of the MLP's grads and
    // attention's dq/dk/dv with their fp32 accumulators (`layer_backward_transient_per_token`).
    Bytes mlp = blocks_slack_bound(checked_mul(e * m.intermediate, T), m.gated_mlp ? 3 : 2);
    if (s.adapted(Module::down_proj) && a != e)
      mlp += blocks_slack_bound(checked_mul(a * m.intermediate, T)) + blocks_slack_bound(checked_mul(e * m.intermediate, T));
    Bytes attention = blocks_slack_bound(checked_mul(e * m.q_width(), T)) +
                      blocks_slack_bound(checked_mul(e * m.kv_width(), T), 2) +
                      blocks_slack_bound(checked_mul(4 * m.q_width(), T)) + blocks_slack_bound(checked_mul(4 * m.heads, T));
    if (m.kv_heads != m.heads) attention += blocks_slack_bound(checked_mul(e * m.q_width(), T), 2);
    if (m.qk_norm)
      attention += blocks_slack_bound(checked_mul(4 * m.q_width(), T)) + blocks_slack_bound(checked_mul(4 * m.kv_width(), T));
    Bytes transient = blocks_slack_bound(checked_mul(e * m.hidden, T), 2) + max(mlp, attention) + transient_scores;
    if (s.lora_dropout())  // dropout's second copy of the widest adapted input's grad
      transient += blocks_slack_bound(checked_mul(checked_mul(a, detail::widest_adapted_input(m, s)), T));
    if (autocast) {  // the same tensors `layer_backward_transient_per_token` counts under autocast
      const detail::TransientTensors t = detail::autocast_backward_transients(m, s, a);
      transient = transient_scores;
      for (std::size_t k = 0; k < t.count; ++k) transient += blocks_slack_bound(checked_mul(t.per_token[k], T));
    }
    // The final norm's saved set and lm_head's input; ids, labels, cos and sin; the embedding's grad.
    // (The final norm's output in the residual's dtype; full: lm_head's input in the compute dtype.)
    Bytes head = blocks_slack_bound(checked_mul(r * m.hidden, T)) +
                 (full ? blocks_slack_bound(checked_mul(e * m.hidden, T)) : Bytes{}) + blocks_slack_bound(checked_mul(4, T));
    if constexpr (P::figures.norm == NormSaves::fp32_upcast) head += blocks_slack_bound(checked_mul(4 * m.hidden, T));
    const std::uint64_t other_batches = s.grad_accum > 1 ? checked_mul(2, s.grad_accum - 1) : 0;
    const Bytes fixed = blocks_slack_bound(checked_mul(8, T), checked_add(P::figures.token_buffer_bytes / 8, other_batches)) +
                        blocks_slack_bound(checked_mul(r * s.seq, m.head_dimension()), 2);
    // Gradient accumulation: the earlier grads through the forward, a new grad in flight.
    const bool accumulates = s.grad_accum > 1;
    const Bytes held_grads = accumulates ? trainable : Bytes{};
    const Bytes new_grad = accumulates ? blocks_slack_bound(checked_mul(g, tensors.largest)) : Bytes{};
    // Autocast's weight copies, phase by phase as `detail::autocast_copies` counts them.
    detail::AutocastCopies copies;
    if (autocast && !full && a != e) copies = {adapter_copies * m.layers, adapter_copies * m.layers,
                                               adapter_copies * m.layers, adapter_copies * m.layers};
    if (autocast && w != e) {
      const Bytes head_copy = blocks_slack_bound(checked_mul(e, m.embedding_parameters()));
      const bool ckpt = s.gradient_checkpointing;
      copies.forward += ckpt && !full ? head_copy + largest_copy : layer_copies * m.layers + head_copy;
      copies.loss_backward += ckpt ? head_copy : layer_copies * m.layers + head_copy;
      copies.backward_top += ckpt ? layer_copies : layer_copies * m.layers;
      copies.backward_bottom += layer_copies;
    }
    const Bytes embedding_backward = full ? blocks_slack_bound(checked_mul(4 * m.hidden, T)) : Bytes{};

    // The loss: logits, fp32 copy and log-softmax, then three loss-sized buffers; retained logits.
    const std::uint64_t elements = checked_mul(T, m.vocab);
    const std::uint64_t loss = (P::figures.loss_upcast || e == 4) ? 4 : e;
    const bool copy = P::figures.loss_upcast && e != 4;
    const Bytes kept = s.logits_retained ? blocks_slack_bound(checked_mul(e, elements)) : Bytes{};
    const Bytes logits_forward = blocks_slack_bound(checked_mul(e, elements)) +
                                 (copy ? blocks_slack_bound(checked_mul(4, elements)) : Bytes{}) +
                                 blocks_slack_bound(checked_mul(loss, elements));
    const Bytes logits_backward = blocks_slack_bound(checked_mul(loss, elements), 3) + kept;

    PhaseBytes out;
    out.add_everywhere(Bytes(P::figures.autograd_workspace_bytes));
    out[Phase::forward] += persistent + held_grads + copies.forward + stack.forward + head + fixed + logits_forward;
    out[Phase::loss_backward] +=
        persistent + held_grads + copies.loss_backward + stack.forward + head + fixed + logits_backward;
    out[Phase::backward_top] +=
        persistent + held_grads + new_grad + copies.backward_top + top_grads + stack.top + transient + fixed + kept;
    out[Phase::backward_bottom] += persistent + trainable + new_grad + copies.backward_bottom + tied_extra +
                                  stack.bottom + transient + fixed + embedding_backward + kept;
    const Bytes scratch(P::figures.clips_grad_norm ? checked_mul(508, checked_mul(2, checked_add(tensors.count, 4))) : 0);
    out[Phase::optimizer_step] += weights + adapters + trainable + moments + temporaries + scratch + kept;
    return out;
  }
};

namespace detail {
/**
 * The slack the caching allocator is expected to count in a steady step of a fresh process
 * (`block_slack` per saved activation, loss buffer and, in full fine-tuning, grad): the closed
 * form's figure before it became a bound, kept for `required` where the simulation runs.
 * @tparam P the stack profile
 */
template <StackProfile P>
struct ExpectedSlackTerm {
  static constexpr std::string_view name = "allocator slack";
  using profile = P;

  constexpr PhaseBytes operator()(const ModelShape& m, const Step& s) const {
    const std::uint64_t T = s.tokens();
    const std::uint64_t e = element_bytes(s.precision);
    const SavedTensors saved = layer_saved_tensors<P>(m, s);
    Bytes layer;
    for (std::size_t k = 0; k < saved.count; ++k) layer += Bytes(block_slack(checked_mul(saved.per_token[k], T)));
    const std::uint64_t input = block_slack(checked_mul(e * m.hidden, T));
    const LayerStack stack = layer_stack(layer, Bytes(input), m.layers, s.gradient_checkpointing);
    // The loss's buffers (logits, fp32 copy, log-softmax, its grads) and the final norm's input.
    const std::uint64_t elements = checked_mul(T, m.vocab);
    const std::uint64_t loss = block_slack(checked_mul(e, elements)) + 3 * block_slack(checked_mul(4, elements)) +
                               2 * input;
    // Full fine-tuning: the grads, one per weight. (Not the weights: their packing follows the
    // model's construction order; measured slack there is under 9 MB.)
    const bool full = s.mode == Mode::full;
    std::uint64_t layer_grads = 0;
    std::uint64_t head_grads = 0;
    if (full) {
      for (Module mod : all_modules)
        if (m.has(mod)) layer_grads += block_slack(checked_mul(e, checked_mul(m.dims(mod).in, m.dims(mod).out)));
      head_grads = block_slack(checked_mul(e, m.embedding_parameters())) * (m.tied_embeddings ? 1 : 2);
    }
    const std::uint64_t grads_top = full ? layer_grads + head_grads : 0;
    const std::uint64_t grads_all = full ? checked_mul(layer_grads, m.layers) + head_grads : 0;
    // Under checkpointing the forward's end is charged one layer's saved set too.
    PhaseBytes out;
    out[Phase::forward] = stack.top + Bytes(loss);
    out[Phase::loss_backward] = stack.top + Bytes(loss);
    out[Phase::backward_top] = stack.top + Bytes(grads_top);
    out[Phase::backward_bottom] = stack.bottom + Bytes(grads_all);
    out[Phase::optimizer_step] = Bytes(grads_all);
    return out;
  }
};
}  // namespace detail

/// Allocations that live for the whole run outside the model: the cuBLAS / cuBLASLt workspaces
/// the caching allocator hands out on the first matmul and keeps.
/// @tparam P the stack profile
template <StackProfile P>
struct WorkspaceTerm {
  static constexpr std::string_view name = "workspace";
  using profile = P;
  constexpr PhaseBytes operator()(const ModelShape&, const Step&) const {
    PhaseBytes out;
    out.add_everywhere(Bytes(P::figures.workspace_bytes));
    return out;
  }
};

}  // namespace vramfit
