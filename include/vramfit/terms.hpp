#pragma once
/// @file terms.hpp
/// The cost terms: what each keeps live at every phase of a step; a `Predictor` adds them phase by
/// phase. Notation: T tokens, V vocab, h hidden, i intermediate, q/kv query/key widths, H heads,
/// r rank, e and a bytes per model and adapter element. Derivations and measured figures:
/// tests/validation/README.md#cost-terms

#include <algorithm>
#include <concepts>
#include <cstdint>
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

/// Per-token bytes that one RMSNorm saves for backward.
template <StackProfile P>
constexpr std::uint64_t norm_saved_per_token(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  if constexpr (P::figures.norm == NormSaves::fp32_upcast) {
    // fp32 copy and rsqrt; the pre-weight copy when the weight trains.
    return 4 * m.hidden + 4 + (s.mode == Mode::full ? e * m.hidden : 0);
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
};

/// The tensors one decoder layer saves for backward, each as bytes per token.
struct SavedTensors {
  // At most 6 (norms) + 5 (attention) + 3 (MLP) + 21 (adapters on all seven projections, with
  // dropout: input copy, mask, lora_A's output) = 35 tensors.
  std::uint64_t per_token[40];  // only [0, count) is ever read
  std::size_t count = 0;
  constexpr void add(std::uint64_t bytes) { per_token[count++] = bytes; }
  [[nodiscard]] constexpr std::uint64_t total() const {
    std::uint64_t n = 0;
    for (std::size_t k = 0; k < count; ++k) n += per_token[k];
    return n;
  }
};

/**
 * The tensors one decoder layer saves for backward, without checkpointing: two RMSNorms' saved
 * sets, SDPA's q, k, v, output and log-sum-exp, the MLP's gate/SiLU/up outputs, and each
 * projection input a trainable weight or an adapter keeps (a per-module fp32 copy under PEFT),
 * plus lora_A's outputs; with LoRA dropout, each adapter's dropped copy of its input and the
 * dropout's one-byte mask. Derivation: tests/validation/README.md#activations
 */
template <StackProfile P>
constexpr SavedTensors layer_saved_tensors(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  const std::uint64_t a = adapter_element_bytes<P>(s);
  const bool casts = a != e;
  const bool full = s.mode == Mode::full;
  SavedTensors t;
  for (int norm = 0; norm < 2; ++norm) {
    if constexpr (P::figures.norm == NormSaves::fp32_upcast) {
      t.add(4 * m.hidden);
      t.add(4);
      if (full) t.add(e * m.hidden);
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
  for (int k = 0; k < (m.gated_mlp ? 3 : 1); ++k) t.add(e * m.intermediate);

  const InputGroup groups[] = {
      {{Module::q_proj, Module::k_proj, Module::v_proj}, 3, m.hidden, false},
      {{Module::o_proj}, 1, m.q_width(), true},
      {{Module::gate_proj, Module::up_proj}, 2, m.hidden, false},
      {{Module::down_proj}, 1, m.intermediate, false},
  };
  for (const auto& g : groups) {
    bool input_saved = g.saved_elsewhere;
    if (full && !input_saved) {
      t.add(e * g.width);
      input_saved = true;
    }
    for (int k = 0; k < g.count; ++k) {
      const Module mod = g.modules[k];
      if (!m.has(mod) || !s.adapted(mod)) continue;
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
 * Per-token bytes of the transients of one decoder layer's backward, on top of its saved
 * tensors: the hidden state's two grads (2 e h) and the larger of the MLP's grads and flash
 * attention's dq/dk/dv with their fp32 accumulators.
 */
template <StackProfile P>
constexpr std::uint64_t layer_backward_transient_per_token(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  const std::uint64_t a = adapter_element_bytes<P>(s);
  std::uint64_t mlp = (m.gated_mlp ? 3 : 2) * e * m.intermediate;
  if (s.adapted(Module::down_proj) && a != e) mlp += (a + e) * m.intermediate;
  std::uint64_t attention = e * (m.q_width() + 2 * m.kv_width()) + 4 * m.q_width() + 4 * m.heads;
  if (m.kv_heads != m.heads) attention += 2 * e * m.q_width();
  // With LoRA dropout, dropout's backward (grad x mask / (1 - p)) is a second adapter-dtype copy of
  // an adapted projection's input grad beside lora_A's: the widest such input, on top.
  std::uint64_t dropout = 0;
  if (s.lora_dropout())
    for (Module mod : all_modules)
      if (m.has(mod) && s.adapted(mod)) dropout = std::max(dropout, a * m.dims(mod).in);
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
    // int64 ids and labels; cos and sin tables (seq x head_dim each, model dtype).
    const Bytes fixed = bytes_of(P::figures.token_buffer_bytes, {T}) + bytes_of(2 * e, {s.seq, m.head_dimension()});
    // Full fine-tuning: the embedding's backward accumulates per token in fp32.
    const Bytes embedding_backward = full ? bytes_of(4 * m.hidden, {T}) : Bytes{};

    const detail::LayerStack stack =
        detail::layer_stack(layer, bytes_of(e * m.hidden, {T}), m.layers, s.gradient_checkpointing);
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
 * Weights, LoRA adapters, grads, AdamW's two moments (in the parameter's dtype) and the update's
 * temporaries. Grads appear during the backward; moments exist from the first optimizer step on
 * (`PeakOver::steady`). On several ranks: rank 0's (sharding.hpp).
 * @tparam P the stack profile
 */
template <StackProfile P>
struct ParameterTerm {
  static constexpr std::string_view name = "parameters";
  using profile = P;

  /// Adapter parameters (lora_A: r x d_in, lora_B: d_out x r) over all layers.
  static constexpr std::uint64_t adapter_parameters(const ModelShape& m, const Step& s) {
    if (s.mode != Mode::lora) return 0;
    std::uint64_t n = 0;
    for (Module mod : all_modules)
      if (m.has(mod) && s.adapted(mod))
        n = detail::checked_add(n, detail::checked_mul(s.lora.rank, m.dims(mod).in + m.dims(mod).out));
    return detail::checked_mul(n, m.layers);
  }

  constexpr PhaseBytes operator()(const ModelShape& m, const Step& s) const {
    const std::uint64_t e = element_bytes(s.precision);
    const std::uint64_t a = detail::adapter_element_bytes<P>(s);
    if (!s.single_gpu()) return detail::sharded_parameter_bytes(m, s, {e, a, P::figures.adamw});
    const bool full = s.mode == Mode::full;
    const Bytes weights = bytes_of(e, {m.parameters()});
    const Bytes adapters = bytes_of(a, {adapter_parameters(m, s)});
    const Bytes trainable = full ? weights : adapters;
    const Bytes moments = trainable * 2;

    Bytes largest;  // the largest trainable tensor
    if (full) {
      largest = bytes_of(e, {m.largest_tensor()});
    } else {
      for (Module mod : all_modules)
        if (m.has(mod) && s.adapted(mod)) {
          const auto d = m.dims(mod);
          largest = max(largest, bytes_of(a, {s.lora.rank, d.in > d.out ? d.in : d.out}));
        }
    }
    const Bytes temporaries = P::figures.adamw == AdamWTemporaries::foreach_group ? trainable : largest * 2;
    // Grads at the top of the layer backward: lm_head (or the tied embedding) and final norm,
    // plus the last layer's; for LoRA the last layer's adapters.
    const Bytes top_grads = full ? bytes_of(e, {detail::checked_add(m.embedding_parameters(), m.hidden)}) +
                                       bytes_of(e, {m.layer_parameters()})
                                 : Bytes(adapters.count() / m.layers);
    // A tied embedding gets its grad as a new tensor, then added into lm_head's.
    const Bytes tied_extra = (full && m.tied_embeddings) ? bytes_of(e, {m.embedding_parameters()}) : Bytes{};

    const Bytes persistent = weights + (full ? Bytes{} : adapters) + (s.peak_over == PeakOver::steady ? moments : Bytes{});
    PhaseBytes out;
    out[Phase::forward] = persistent;
    out[Phase::loss_backward] += persistent;
    out[Phase::backward_top] += persistent + top_grads;
    out[Phase::backward_bottom] += persistent + trainable + tied_extra;
    out[Phase::optimizer_step] = weights + (full ? Bytes{} : adapters) + trainable + moments + temporaries;
    return out;
  }
};

/**
 * The caching allocator's slack, bounded: what its rules let it count as allocated beyond what
 * the live tensors asked for, `detail::block_slack_bound` summed over every tensor live at each
 * phase (weights, adapters, grads, moments, AdamW's temporaries, saved activations, the backward's
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
    using detail::checked_mul;
    const std::uint64_t e = element_bytes(s.precision);
    const std::uint64_t a = detail::adapter_element_bytes<P>(s);
    const std::uint64_t T = s.tokens();
    const bool full = s.mode == Mode::full;

    // Parameters: one tensor each. Per layer: projections, q/k/v biases, two norms.
    Bytes layer_weights, layer_adapters;
    for (Module mod : all_modules) {
      if (!m.has(mod)) continue;
      const auto d = m.dims(mod);
      layer_weights += blocks_slack_bound(checked_mul(e, checked_mul(d.in, d.out)));
      if (!full && s.adapted(mod))
        layer_adapters += blocks_slack_bound(checked_mul(a, checked_mul(s.lora.rank, d.in))) +
                          blocks_slack_bound(checked_mul(a, checked_mul(s.lora.rank, d.out)));
    }
    if (m.qkv_bias)
      layer_weights += blocks_slack_bound(e * m.q_width()) + blocks_slack_bound(e * m.kv_width(), 2);
    layer_weights += blocks_slack_bound(e * m.hidden, 2);
    const Bytes head_weights = blocks_slack_bound(checked_mul(e, m.embedding_parameters()), m.tied_embeddings ? 1 : 2) +
                               blocks_slack_bound(e * m.hidden);
    const Bytes weights = layer_weights * m.layers + head_weights;
    const Bytes adapters = layer_adapters * m.layers;
    const Bytes trainable = full ? weights : adapters;  // a grad, a moment or a temporary per trainable tensor
    const Bytes top_grads = full ? head_weights + layer_weights : layer_adapters;
    const Bytes tied_extra =
        full && m.tied_embeddings ? blocks_slack_bound(checked_mul(e, m.embedding_parameters())) : Bytes{};
    const Bytes moments = trainable * 2;
    Bytes temporaries = trainable;
    if constexpr (P::figures.adamw == AdamWTemporaries::per_tensor) {
      std::uint64_t largest = full ? checked_mul(e, m.largest_tensor()) : 0;
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
    const detail::LayerStack stack = detail::layer_stack(layer, blocks_slack_bound(checked_mul(e * m.hidden, T)),
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
    const Bytes transient = blocks_slack_bound(checked_mul(e * m.hidden, T), 2) + max(mlp, attention) + transient_scores;
    // The final norm's saved set and lm_head's input; ids, labels, cos and sin; the embedding's grad.
    Bytes head = blocks_slack_bound(checked_mul(e * m.hidden, T), full ? 2 : 1) + blocks_slack_bound(checked_mul(4, T));
    if constexpr (P::figures.norm == NormSaves::fp32_upcast) head += blocks_slack_bound(checked_mul(4 * m.hidden, T));
    const Bytes fixed = blocks_slack_bound(checked_mul(8, T), P::figures.token_buffer_bytes / 8) +
                        blocks_slack_bound(checked_mul(e * s.seq, m.head_dimension()), 2);
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
    out[Phase::forward] += persistent + stack.forward + head + fixed + logits_forward;
    out[Phase::loss_backward] += persistent + stack.forward + head + fixed + logits_backward;
    out[Phase::backward_top] += persistent + top_grads + stack.top + transient + fixed + kept;
    out[Phase::backward_bottom] += persistent + trainable + tied_extra + stack.bottom + transient + fixed +
                                  embedding_backward + kept;
    out[Phase::optimizer_step] += weights + adapters + trainable + moments + temporaries + kept;
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
