#pragma once
/// @file terms.hpp
/// The cost terms: each says what it keeps live at every phase of a step. A `Predictor` adds
/// them phase by phase and takes the largest phase. A user can swap any term for their own type
/// (anything that models `CostTerm`) or add one.
///
/// Notation in the comments: T tokens (batch x seq), V vocab, h hidden, i intermediate,
/// q = heads x head_dim, kv = kv_heads x head_dim, H heads, r LoRA rank, e bytes per element of
/// the model dtype (2 for bf16), a bytes per adapter element.

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
  return P::adapter_bytes != 0 ? P::adapter_bytes : element_bytes(s.precision);
}

/// Per-token bytes that one RMSNorm saves for backward.
template <StackProfile P>
constexpr std::uint64_t norm_saved_per_token(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  if constexpr (P::norm == NormSaves::fp32_upcast) {
    // fp32 copy of the input (pow and mul), rsqrt per token; the weight's grad needs the
    // pre-weight copy in the model dtype when the weight trains.
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

/**
 * Per-token bytes one decoder layer saves for backward, without checkpointing. Counted from the
 * tensors autograd keeps (a matmul saves an operand only when the other operand needs a grad):
 * - two RMSNorms (`norm_saved_per_token`);
 * - attention (flash / memory-efficient SDPA): q (e x q), k and v (e x kv each), the output
 *   (e x q) and the fp32 log-sum-exp per head (4 x H);
 * - MLP: gated: gate output (saved by SiLU), SiLU output and up output (saved by the product):
 *   3 e x i; not gated: the up output (saved by the activation): e x i;
 * - projection inputs: a trainable base weight saves its input (once per distinct input); an
 *   adapter saves its input too: its own cast copy (a x d_in) when the adapter dtype differs
 *   (PEFT casts per module), else the shared input once; plus lora_A's output (a x r).
 */
template <StackProfile P>
constexpr std::uint64_t layer_saved_per_token(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  const std::uint64_t a = adapter_element_bytes<P>(s);
  const bool casts = a != e;
  const bool full = s.mode == Mode::full;
  std::uint64_t n = 2 * norm_saved_per_token<P>(m, s);
  n += e * (m.q_width() + 2 * m.kv_width()) + e * m.q_width() + 4 * m.heads;
  n += m.gated_mlp ? 3 * e * m.intermediate : e * m.intermediate;

  const InputGroup groups[] = {
      {{Module::q_proj, Module::k_proj, Module::v_proj}, 3, m.hidden, false},
      {{Module::o_proj}, 1, m.q_width(), true},
      {{Module::gate_proj, Module::up_proj}, 2, m.hidden, false},
      {{Module::down_proj}, 1, m.intermediate, false},
  };
  for (const auto& g : groups) {
    bool input_saved = g.saved_elsewhere;
    if (full && !input_saved) {
      n += e * g.width;
      input_saved = true;
    }
    for (int k = 0; k < g.count; ++k) {
      const Module mod = g.modules[k];
      if (!m.has(mod) || !s.adapted(mod)) continue;
      if (casts) {
        n += a * g.width;
      } else if (!input_saved) {
        n += e * g.width;
        input_saved = true;
      }
      n += a * s.lora.rank;
    }
  }
  return n;
}

/**
 * Per-token bytes of the transients of one decoder layer's backward, on top of its saved
 * tensors: the incoming and the residual grad of the hidden state (2 e x h) and the larger of
 * - the MLP's: grad of the product and of both factors (3 e x i gated, 2 e x i not), plus, when
 *   down_proj's adapter casts its input, the fp32 grad of that copy and its cast back ((a+e) x i);
 * - flash attention's: dq, dk, dv (dk and dv per query head first under GQA, then summed), and
 *   the fp32 dq accumulator and softmax row sums.
 */
template <StackProfile P>
constexpr std::uint64_t layer_backward_transient_per_token(const ModelShape& m, const Step& s) {
  const std::uint64_t e = element_bytes(s.precision);
  const std::uint64_t a = adapter_element_bytes<P>(s);
  std::uint64_t mlp = (m.gated_mlp ? 3 : 2) * e * m.intermediate;
  if (s.adapted(Module::down_proj) && a != e) mlp += (a + e) * m.intermediate;
  std::uint64_t attention = e * (m.q_width() + 2 * m.kv_width()) + 4 * m.q_width() + 4 * m.heads;
  if (m.kv_heads != m.heads) attention += 2 * e * m.q_width();
  return 2 * e * m.hidden + (mlp > attention ? mlp : attention);
}

/// Bytes of the (batch x heads x seq x seq) score matrix the math backend builds, per byte of
/// element: the caller multiplies by bytes per score.
constexpr Bytes score_elements(const ModelShape& m, const Step& s) {
  return bytes_of(1, {s.batch, m.heads, s.seq, s.seq});
}

}  // namespace detail

/**
 * Saved activations of the decoder layers, the final norm, rotary tables and token buffers.
 * With gradient checkpointing (non-reentrant) each layer keeps only its input (e x h per token)
 * and the backward recomputes one layer at a time, which then holds that layer's saved set plus
 * its backward transients. The math attention backend adds the fp32 (seq x seq) probabilities per
 * head (saved) and two more score-sized buffers in its backward (the grad of the probabilities
 * and of the scores); flash and memory-efficient kernels are linear in sequence.
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
      transient += detail::score_elements(m, s) * 8;
    }
    // Final norm, plus lm_head's input when lm_head trains.
    const Bytes head = bytes_of(detail::norm_saved_per_token<P>(m, s) + (full ? e * m.hidden : 0), {T});
    // int64 ids and labels; cos and sin tables (seq x head_dim each, model dtype).
    const Bytes fixed = bytes_of(P::token_buffer_bytes, {T}) + bytes_of(2 * e, {s.seq, m.head_dimension()});
    // Full fine-tuning: the embedding's backward accumulates per token in fp32.
    const Bytes embedding_backward = full ? bytes_of(4 * m.hidden, {T}) : Bytes{};

    PhaseBytes out;
    if (!s.gradient_checkpointing) {
      const Bytes all = layer * m.layers;
      out[Phase::forward] = all + head + fixed;
      out[Phase::loss_backward] = all + head + fixed;
      out[Phase::backward_top] = all + transient + fixed;
      out[Phase::backward_bottom] = layer + transient + fixed + embedding_backward;
    } else {
      const Bytes input = bytes_of(e * m.hidden, {T});
      const Bytes inputs = input * m.layers;
      out[Phase::forward] = inputs + head + fixed;
      out[Phase::loss_backward] = inputs + head + fixed;
      out[Phase::backward_top] = inputs + layer + transient + fixed;
      out[Phase::backward_bottom] = input + layer + transient + fixed + embedding_backward;
    }
    return out;
  }
};

/**
 * The logits and the loss: B*S*V elements. Forward: the logits (e), their fp32 copy when the
 * profile upcasts (4), the log-softmax output (4 when computed in fp32, else e). Backward of
 * log-softmax: its saved output, the grad from NLL and its own grad, all in the loss dtype
 * (3 x 4 = 12 B per element with the upcast, 3 x 2 = 6 without), plus the logits themselves (e)
 * when the caller keeps the model output through backward (and so through the optimizer step).
 * @tparam P the stack profile
 */
template <StackProfile P>
struct LogitsTerm {
  static constexpr std::string_view name = "logits";
  using profile = P;

  /// Bytes per logits element at each phase, for a step.
  static constexpr PhaseBytes per_element(const Step& s) {
    const std::uint64_t e = element_bytes(s.precision);
    const std::uint64_t loss = (P::loss_upcast || e == 4) ? 4 : e;
    const std::uint64_t copy = (P::loss_upcast && e != 4) ? 4 : 0;
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
 * Weights, LoRA adapters, grads, AdamW's two moments (in the parameter's dtype) and the
 * update's temporaries. Grads are freed by zero_grad(set_to_none) and appear during backward:
 * the last layer's (and lm_head's) at the top, all of them at the bottom. Moments exist from the
 * first optimizer step on, so they are live through the forward and backward of every later step
 * (`PeakOver::steady`) but not of the first. With more than one rank or a sharding strategy the
 * bytes are rank 0's, from `detail::sharded_parameter_bytes` (vramfit/sharding.hpp).
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
    if (!s.single_gpu()) return detail::sharded_parameter_bytes(m, s, {e, a, P::adamw});
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
    const Bytes temporaries = P::adamw == AdamWTemporaries::foreach_group ? trainable : largest * 2;
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
    out[Phase::loss_backward] = persistent;
    out[Phase::backward_top] = persistent + top_grads;
    out[Phase::backward_bottom] = persistent + trainable + tied_extra;
    out[Phase::optimizer_step] = weights + (full ? Bytes{} : adapters) + trainable + moments + temporaries;
    return out;
  }
};

/// Allocations that live for the whole run outside the model: the cuBLAS / cuBLASLt workspaces
/// the caching allocator hands out on the first matmul and keeps.
/// @tparam P the stack profile
template <StackProfile P>
struct WorkspaceTerm {
  static constexpr std::string_view name = "workspace";
  using profile = P;
  constexpr PhaseBytes operator()(const ModelShape&, const Step&) const {
    PhaseBytes out;
    out.add_everywhere(Bytes(P::workspace_bytes));
    return out;
  }
};

}  // namespace vramfit
