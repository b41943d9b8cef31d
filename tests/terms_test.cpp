// Cost terms, each priced by hand for one small made-up shape from the formulas in the comments of
// terms.hpp and profiles.hpp. The expected numbers are written out as arithmetic; none of them
// calls the code under test.
//
// The shape: V 1000, h 64, i 160, 3 layers, H 4 query heads of 16 (q width 64), 2 kv heads (kv
// width 32), gated MLP, untied, no biases. The step: batch 2, seq 8 (T = 16 tokens), bf16 (e = 2),
// LoRA rank 4 on q_proj and v_proj unless a case says otherwise.
#include <doctest/doctest.h>

#include "support.hpp"

#include <cstdint>

#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/step.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/terms.hpp"

using namespace vramfit;
using vramfit::test::check_phases;
using vramfit::test::small;
using vramfit::test::lora_qv;

namespace {

constexpr std::uint64_t T = 16;

using HfPeft = profiles::HfPeft;
using LibTorch = profiles::LibTorch;


// Parameters of the shape: per layer q 64x64 + k 64x32 + v 64x32 + o 64x64 + 3 x 64x160 + 2 norms x 64.
constexpr std::uint64_t layer_params = 4096 + 2048 + 2048 + 4096 + 3 * 10240 + 2 * 64;  // 43136
constexpr std::uint64_t embedding_params = 1000 * 64;                                    // 64000
// 3 layers + embedding + untied lm_head + final norm.
constexpr std::uint64_t all_params = 3 * layer_params + 2 * embedding_params + 64;  // 257472
// LoRA rank 4 on q (64 -> 64) and v (64 -> 32): r x (d_in + d_out) each, per layer.
constexpr std::uint64_t adapter_params_qv = 3 * (4 * (64 + 64) + 4 * (64 + 32));  // 2688

}  // namespace

TEST_CASE("ParameterTerm: LoRA under hf-peft (fp32 adapters, foreach AdamW)") {
  const std::uint64_t weights = 2 * all_params;          // bf16 weights
  const std::uint64_t adapters = 4 * adapter_params_qv;  // fp32 adapters
  const std::uint64_t moments = 2 * adapters;            // exp_avg, exp_avg_sq in the adapters' dtype
  const std::uint64_t temporaries = adapters;            // foreach: one temporary per trainable param
  const std::uint64_t last_layer_grads = adapters / 3;

  CHECK(ParameterTerm<HfPeft>::adapter_parameters(small, lora_qv) == adapter_params_qv);

  SUBCASE("steady: the moments live through the whole step") {
    const std::uint64_t persistent = weights + adapters + moments;
    check_phases(ParameterTerm<HfPeft>{}(small, lora_qv), persistent, persistent, persistent + last_layer_grads,
                 persistent + adapters, weights + adapters + adapters + moments + temporaries);
  }
  SUBCASE("first step: the moments appear in the optimizer step") {
    Step first = lora_qv;
    first.peak_over = PeakOver::first_step;
    const std::uint64_t persistent = weights + adapters;
    check_phases(ParameterTerm<HfPeft>{}(small, first), persistent, persistent, persistent + last_layer_grads,
                 persistent + adapters, weights + adapters + adapters + moments + temporaries);
  }
}

TEST_CASE("ParameterTerm: LoRA under libtorch (adapters in bf16, per-tensor AdamW)") {
  const std::uint64_t weights = 2 * all_params;
  const std::uint64_t adapters = 2 * adapter_params_qv;
  const std::uint64_t moments = 2 * adapters;
  // Two temporaries the size of the largest adapter tensor: q's lora_B is 64 x 4 (bf16).
  const std::uint64_t temporaries = 2 * (2 * 4 * 64);
  const std::uint64_t persistent = weights + adapters + moments;
  check_phases(ParameterTerm<LibTorch>{}(small, lora_qv), persistent, persistent, persistent + adapters / 3,
               persistent + adapters, weights + adapters + adapters + moments + temporaries);
}

TEST_CASE("ParameterTerm: full fine-tuning") {
  Step full = lora_qv;
  full.mode = Mode::full;
  // Grads at the top: lm_head (V x h) + final norm (h) + the last layer, in bf16.
  const std::uint64_t top_grads = 2 * (embedding_params + 64) + 2 * layer_params;

  SUBCASE("hf-peft, untied: foreach temporaries the size of all weights (10 B/param at the step)") {
    const std::uint64_t weights = 2 * all_params;
    const std::uint64_t persistent = weights + 2 * weights;
    check_phases(ParameterTerm<HfPeft>{}(small, full), persistent, persistent, persistent + top_grads,
                 persistent + weights, 5 * weights);
    CHECK(5 * weights == 10 * all_params);
  }
  SUBCASE("libtorch, tied: per-tensor temporaries of the embedding; the tied grad's extra copy") {
    ModelShape tied = small;
    tied.tied_embeddings = true;
    const std::uint64_t weights = 2 * (all_params - embedding_params);
    const std::uint64_t persistent = weights + 2 * weights;
    const std::uint64_t temporaries = 2 * (2 * embedding_params);  // two copies of the 1000 x 64 embedding
    const std::uint64_t tied_grad = 2 * embedding_params;
    check_phases(ParameterTerm<LibTorch>{}(tied, full), persistent, persistent, persistent + top_grads,
                 persistent + weights + tied_grad, weights + weights + 2 * weights + temporaries);
  }
}

TEST_CASE("ActivationTerm: LoRA under hf-peft, with per-module fp32 casts") {
  // Per token, one layer saves:
  const std::uint64_t norms = 2 * (4 * 64 + 4);             // fp32 copy + rsqrt, two RMSNorms
  const std::uint64_t attention = 2 * (64 + 32 + 32) + 2 * 64 + 4 * 4;  // q, k, v, output, fp32 lse per head
  const std::uint64_t mlp = 3 * 2 * 160;                    // gate out, SiLU out, up out
  const std::uint64_t adapters = 2 * (4 * 64 + 4 * 4);      // q and v: own fp32 copy of x + fp32 lora_A output
  const std::uint64_t layer = (norms + attention + mlp + adapters) * T;
  CHECK(norms + attention + mlp + adapters == 2424);
  // Backward transients per token: 2 hidden grads + max(MLP 3 e i, flash: dq dk dv + fp32 dq + row sums
  // + per-query-head dk dv under GQA).
  const std::uint64_t mlp_backward = 3 * 2 * 160;
  const std::uint64_t flash_backward = 2 * (64 + 2 * 32) + 4 * 64 + 4 * 4 + 2 * 2 * 64;
  REQUIRE(mlp_backward > flash_backward);  // 960 > 784
  const std::uint64_t transient = (2 * 2 * 64 + mlp_backward) * T;
  const std::uint64_t head = (4 * 64 + 4) * T;          // final norm (frozen weight)
  const std::uint64_t fixed = 4 * 8 * T + 2 * 2 * 8 * 16;  // four int64 token buffers; cos + sin (seq x head_dim)

  SUBCASE("flash, no checkpointing") {
    check_phases(ActivationTerm<HfPeft>{}(small, lora_qv), 3 * layer + head + fixed, 3 * layer + head + fixed,
                 3 * layer + transient + fixed, layer + transient + fixed, 0);
  }
  SUBCASE("gradient checkpointing: layer inputs, then one layer recomputed at a time") {
    Step s = lora_qv;
    s.gradient_checkpointing = true;
    const std::uint64_t input = 2 * 64 * T;  // bf16 layer input
    check_phases(ActivationTerm<HfPeft>{}(small, s), 3 * input + head + fixed, 3 * input + head + fixed,
                 3 * input + layer + transient + fixed, input + layer + transient + fixed, 0);
  }
  SUBCASE("math attention: fp32 probabilities saved (4 B a score), 12 B a score more in backward") {
    Step s = lora_qv;
    s.attention = Attention::math;
    const std::uint64_t scores = 2 * 4 * 8 * 8;  // batch x heads x seq x seq
    const std::uint64_t math_layer = layer + 4 * scores;
    const std::uint64_t math_transient = transient + 12 * scores;
    check_phases(ActivationTerm<HfPeft>{}(small, s), 3 * math_layer + head + fixed, 3 * math_layer + head + fixed,
                 3 * math_layer + math_transient + fixed, math_layer + math_transient + fixed, 0);
  }
  SUBCASE("mem-efficient attention is priced as flash (linear in sequence)") {
    Step s = lora_qv;
    s.attention = Attention::mem_efficient;
    CHECK(ActivationTerm<HfPeft>{}(small, s) == ActivationTerm<HfPeft>{}(small, lora_qv));
  }
}

TEST_CASE("ActivationTerm: hf-peft LoRA on all linear projections") {
  Step s = lora_qv;
  s.lora.targets = TargetSet::all_linear();
  const std::uint64_t norms = 2 * (4 * 64 + 4);
  const std::uint64_t attention = 2 * (64 + 32 + 32) + 2 * 64 + 4 * 4;
  const std::uint64_t mlp = 3 * 2 * 160;
  // Each adapter: its own fp32 copy of its input + its fp32 lora_A output (rank 4).
  const std::uint64_t adapters = 3 * (4 * 64 + 4 * 4)  // q, k, v read the normed hidden state (64)
                                 + (4 * 64 + 4 * 4)    // o reads the attention output (64)
                                 + 2 * (4 * 64 + 4 * 4)  // gate, up read the normed hidden state
                                 + (4 * 160 + 4 * 4);  // down reads the product (160)
  const std::uint64_t layer = (norms + attention + mlp + adapters) * T;
  // down_proj's cast adds the fp32 grad of its input copy and its cast back: (4 + 2) x i.
  const std::uint64_t mlp_backward = 3 * 2 * 160 + (4 + 2) * 160;
  const std::uint64_t transient = (2 * 2 * 64 + mlp_backward) * T;
  const std::uint64_t head = (4 * 64 + 4) * T;
  const std::uint64_t fixed = 4 * 8 * T + 2 * 2 * 8 * 16;
  check_phases(ActivationTerm<HfPeft>{}(small, s), 3 * layer + head + fixed, 3 * layer + head + fixed,
               3 * layer + transient + fixed, layer + transient + fixed, 0);
}

TEST_CASE("ActivationTerm: LoRA dropout keeps each adapter's dropped input copy and its one-byte mask") {
  Step s = lora_qv;
  s.lora.dropout = 0.05;
  const std::uint64_t norms = 2 * (4 * 64 + 4);
  const std::uint64_t attention = 2 * (64 + 32 + 32) + 2 * 64 + 4 * 4;
  const std::uint64_t mlp = 3 * 2 * 160;
  // q and v: lora_A saves dropout's fp32 output (the fp32 cast of x, which goes), dropout its mask.
  const std::uint64_t adapters = 2 * (4 * 64 + 64 + 4 * 4);
  const std::uint64_t layer = (norms + attention + mlp + adapters) * T;
  // Dropout's backward: a second fp32 copy of the widest adapted input's grad (q, v: 64).
  const std::uint64_t transient = (2 * 2 * 64 + 3 * 2 * 160 + 4 * 64) * T;
  const std::uint64_t head = (4 * 64 + 4) * T;
  const std::uint64_t fixed = 4 * 8 * T + 2 * 2 * 8 * 16;
  check_phases(ActivationTerm<HfPeft>{}(small, s), 3 * layer + head + fixed, 3 * layer + head + fixed,
               3 * layer + transient + fixed, layer + transient + fixed, 0);
  // The probability is not a size: any dropout above 0 is the same; 0 is PEFT's identity.
  Step other = s;
  other.lora.dropout = 0.5;
  CHECK(ActivationTerm<HfPeft>{}(small, other) == ActivationTerm<HfPeft>{}(small, s));
  other.lora.dropout = 0;
  CHECK(ActivationTerm<HfPeft>{}(small, other) == ActivationTerm<HfPeft>{}(small, lora_qv));
  // Full fine-tuning has no adapters, so no dropout (lora_dropout() is false whatever the field says).
  Step full = s;
  full.mode = Mode::full;
  CHECK_FALSE(full.lora_dropout());
}

TEST_CASE("ParameterTerm: each optimizer's state and temporaries (LoRA q,v: fp32 adapters)") {
  const std::uint64_t weights = 2 * all_params;
  const std::uint64_t adapters = 4 * adapter_params_qv;
  // Per layer four adapter matrices: A_q 4x64, B_q 64x4, A_v 4x64, B_v 32x4.
  const std::uint64_t tensors = 3 * 4;
  const std::uint64_t largest = 4 * 64;                                        // elements of A_q, B_q, A_v
  const std::uint64_t factored = 3 * ((4 + 64) + (64 + 4) + (4 + 64) + (32 + 4));  // rows + columns
  const auto with = [](Optimizer o) {
    Step s = lora_qv;
    s.optimizer = o;
    return ParameterTerm<HfPeft>{}(small, s);
  };
  // The state lives through the step; the optimizer step adds the grads and the temporaries.
  const auto steady = [&](std::uint64_t state, std::uint64_t temporaries) {
    return std::pair{weights + adapters + state, weights + adapters + adapters + state + temporaries};
  };
  SUBCASE("fused AdamW: the moments, a 4-byte step per tensor, no temporaries") {
    const auto [persistent, optimizer] = steady(2 * adapters + 4 * tensors, 0);
    check_phases(with(Optimizer::adamw_fused), persistent, persistent, persistent + adapters / 3,
                 persistent + adapters, optimizer);
  }
  SUBCASE("Adafactor: fp32 row and column vectors; two fp32 tensors of the largest (fp32 adapters)") {
    const auto [persistent, optimizer] = steady(4 * factored, 2 * 4 * largest);
    check_phases(with(Optimizer::adafactor), persistent, persistent, persistent + adapters / 3,
                 persistent + adapters, optimizer);
  }
  SUBCASE("SGD with momentum: one buffer; foreach's weight decay copy") {
    const auto [persistent, optimizer] = steady(adapters, adapters);
    check_phases(with(Optimizer::sgd_momentum), persistent, persistent, persistent + adapters / 3,
                 persistent + adapters, optimizer);
  }
  SUBCASE("SGD: no state") {
    const auto [persistent, optimizer] = steady(0, adapters);
    check_phases(with(Optimizer::sgd), persistent, persistent, persistent + adapters / 3, persistent + adapters,
                 optimizer);
  }
  SUBCASE("Adafactor on bf16 weights: an fp32 grad and weight copy too, four fp32 tensors of the largest") {
    Step full = lora_qv;
    full.mode = Mode::full;
    full.optimizer = Optimizer::adafactor;
    const std::uint64_t full_largest = embedding_params;  // 1000 x 64
    // Per layer 7 matrices and 2 norm vectors; embedding and lm_head (untied), the final norm.
    const std::uint64_t full_factored = 3 * ((64 + 64) + (32 + 64) + (32 + 64) + (64 + 64) + 2 * (160 + 64) +
                                             (64 + 160) + 2 * 64) +
                                        2 * (1000 + 64) + 64;
    const PhaseBytes p = ParameterTerm<HfPeft>{}(small, full);
    CHECK(p[Phase::forward].count() == weights + 4 * full_factored);
    CHECK(p[Phase::optimizer_step].count() == 2 * weights + 4 * full_factored + 4 * 4 * full_largest);
  }
}

namespace {
using HfTrainer = profiles::HfTrainer;
}  // namespace

TEST_CASE("ActivationTerm: Qwen3's q/k norms save as the layer norms do, per head") {
  ModelShape qwen3 = small;
  qwen3.qk_norm = true;
  // q_norm over 4 heads of 16 (q width 64), k_norm over 2 (kv width 32): each an fp32 copy and an
  // fp32 rsqrt per head; full fine-tuning adds the bf16 pre-weight copy.
  const std::uint64_t lora = 4 * 64 + 4 * 4 + 4 * 32 + 4 * 2;
  CHECK(detail::layer_saved_per_token<HfPeft>(qwen3, lora_qv) - detail::layer_saved_per_token<HfPeft>(small, lora_qv) ==
        lora);
  Step full = lora_qv;
  full.mode = Mode::full;
  CHECK(detail::layer_saved_per_token<HfPeft>(qwen3, full) - detail::layer_saved_per_token<HfPeft>(small, full) ==
        lora + 2 * 64 + 2 * 32);
  // Their backward's fp32 grads of q and k join flash attention's transients.
  CHECK(detail::layer_backward_transient_per_token<HfPeft>(qwen3, lora_qv) >=
        detail::layer_backward_transient_per_token<HfPeft>(small, lora_qv));
}

TEST_CASE("hf-trainer without autocast (fp32) saves what hf-peft saves") {
  Step s = lora_qv;
  s.precision = Precision::fp32;
  for (const Mode mode : {Mode::lora, Mode::full}) {
    s.mode = mode;
    CHECK(ActivationTerm<HfTrainer>{}(small, s) == ActivationTerm<HfPeft>{}(small, s));
    CHECK(LogitsTerm<HfTrainer>{}(small, s) == LogitsTerm<HfPeft>{}(small, s));
  }
}

TEST_CASE("hf-trainer: LoRA adapters under bf16 autocast save a bf16 copy of their input each") {
  // PEFT casts the input to the adapters' fp32, autocast casts that to bf16 for lora_A, which
  // saves it: 2 B per element of its input for each adapter (hf-peft: PEFT's fp32 cast, 4 B), and
  // lora_A's output in bf16 (hf-peft: fp32).
  const detail::SavedTensors trainer = detail::layer_saved_tensors<HfTrainer>(small, lora_qv);
  const detail::SavedTensors plain = detail::layer_saved_tensors<HfPeft>(small, lora_qv);
  CHECK(plain.total() - trainer.total() == 2 * (4 * 64 - 2 * 64) + 2 * (4 * 4 - 2 * 4));
  // The cached bf16 copies of the fp32 adapters live from the forward to the backward.
  const PhaseBytes p = ParameterTerm<HfTrainer>{}(small, lora_qv);
  const PhaseBytes q = ParameterTerm<HfPeft>{}(small, lora_qv);
  CHECK(p[Phase::forward].count() - q[Phase::forward].count() == 2 * adapter_params_qv);
}

TEST_CASE("hf-trainer: fp32 weights under bf16 autocast (mixed precision), full fine-tuning") {
  Step s = lora_qv;
  s.mode = Mode::full;
  s.weights = Precision::fp32;
  s.optimizer = Optimizer::adamw_fused;
  const std::uint64_t weights = 4 * all_params, grads = weights, moments = 2 * weights;
  const std::uint64_t steps = 4 * (3 * 9 + 3);  // a 4-byte step per tensor: 9 per layer, embedding, lm_head, norm
  // Autocast's bf16 copies of the projections (43008 elements per layer) and of lm_head (1000 x 64).
  const std::uint64_t layer_copy = 2 * (layer_params - 2 * 64), head_copy = 2 * embedding_params;
  const std::uint64_t top_grads = 4 * (embedding_params + 64) + 4 * layer_params;
  // clip_grad_norm_: a 4-byte norm per tensor and their stack, with the grad scaler's four.
  const std::uint64_t scratch = 4 * 2 * (3 * 9 + 3 + 4);
  const std::uint64_t persistent = weights + moments + steps;
  SUBCASE("without checkpointing every matmul saves its copy until its backward") {
    check_phases(ParameterTerm<HfTrainer>{}(small, s), persistent + 3 * layer_copy + head_copy,
                 persistent + 3 * layer_copy + head_copy, persistent + top_grads + 3 * layer_copy,
                 persistent + grads + layer_copy, weights + grads + moments + steps + scratch);
  }
  SUBCASE("with checkpointing the cache holds them through the forward, the backward one layer's") {
    s.gradient_checkpointing = true;
    check_phases(ParameterTerm<HfTrainer>{}(small, s), persistent + 3 * layer_copy + head_copy,
                 persistent + head_copy, persistent + top_grads + layer_copy, persistent + grads + layer_copy,
                 weights + grads + moments + steps + scratch);
  }
  SUBCASE("activations: the residual stream and the checkpointed inputs in fp32") {
    s.gradient_checkpointing = true;
    Step bf16 = s;
    bf16.weights.reset();
    const PhaseBytes mixed = ActivationTerm<HfTrainer>{}(small, s), plain = ActivationTerm<HfTrainer>{}(small, bf16);
    // Each of the 3 checkpointed layer inputs: 4 B per element of h instead of 2; cos and sin (8 x 16) fp32.
    const std::uint64_t wider = 3 * (4 - 2) * 64 * T + 2 * (4 - 2) * 8 * 16;
    // The final norm's pre-weight copy is fp32 too (lm_head trains).
    CHECK(mixed[Phase::forward].count() - plain[Phase::forward].count() == wider + (4 - 2) * 64 * T);
  }
}

TEST_CASE("hf-trainer: gradient accumulation keeps the grads through the next micro-batch's forward") {
  Step s = lora_qv;
  s.grad_accum = 4;
  const std::uint64_t adapters = 4 * adapter_params_qv;
  const PhaseBytes accumulating = ParameterTerm<HfTrainer>{}(small, s), one = ParameterTerm<HfTrainer>{}(small, lora_qv);
  CHECK(accumulating[Phase::forward].count() - one[Phase::forward].count() == adapters);
  CHECK(accumulating[Phase::loss_backward].count() - one[Phase::loss_backward].count() == adapters);
  // In the backward a new grad, the largest tensor's (A_q 4 x 64, fp32), waits to be added in place.
  CHECK(accumulating[Phase::backward_top].count() - one[Phase::backward_top].count() == adapters + 4 * 4 * 64);
  CHECK(accumulating[Phase::backward_bottom].count() - one[Phase::backward_bottom].count() == 4 * 4 * 64);
  CHECK(accumulating[Phase::optimizer_step] == one[Phase::optimizer_step]);
  // The other three micro-batches' int64 ids and labels are on the GPU for the whole step.
  const PhaseBytes a = ActivationTerm<HfTrainer>{}(small, s), b = ActivationTerm<HfTrainer>{}(small, lora_qv);
  CHECK(a[Phase::forward].count() - b[Phase::forward].count() == 3 * 2 * 8 * T);
}

TEST_CASE("ActivationTerm: LoRA under libtorch, without casts") {
  const std::uint64_t norms = 2 * (2 * 64 + 4);  // fused rms_norm: bf16 input + fp32 inverse RMS
  const std::uint64_t attention = 2 * (64 + 32 + 32) + 2 * 64 + 4 * 4;
  // q and v share their input: saved once (bf16), plus each lora_A output (bf16, rank 4).
  const std::uint64_t adapters = 2 * 64 + 2 * (2 * 4);
  const std::uint64_t head = (2 * 64 + 4) * T;
  const std::uint64_t fixed = 8 * T + 2 * 2 * 8 * 16;  // one int64 buffer (labels are the ids)

  SUBCASE("gated MLP: the MLP's backward is the larger transient") {
    const std::uint64_t layer = (norms + attention + 3 * 2 * 160 + adapters) * T;
    const std::uint64_t transient = (2 * 2 * 64 + 3 * 2 * 160) * T;
    check_phases(ActivationTerm<LibTorch>{}(small, lora_qv), 3 * layer + head + fixed, 3 * layer + head + fixed,
                 3 * layer + transient + fixed, layer + transient + fixed, 0);
  }
  SUBCASE("plain MLP: flash attention's backward is the larger transient") {
    ModelShape plain = small;
    plain.gated_mlp = false;
    const std::uint64_t layer = (norms + attention + 2 * 160 + adapters) * T;  // MLP saves the up output only
    const std::uint64_t mlp_backward = 2 * 2 * 160;
    const std::uint64_t flash_backward = 2 * (64 + 2 * 32) + 4 * 64 + 4 * 4 + 2 * 2 * 64;
    REQUIRE(flash_backward > mlp_backward);  // 784 > 640
    const std::uint64_t transient = (2 * 2 * 64 + flash_backward) * T;
    check_phases(ActivationTerm<LibTorch>{}(plain, lora_qv), 3 * layer + head + fixed, 3 * layer + head + fixed,
                 3 * layer + transient + fixed, layer + transient + fixed, 0);
  }
  SUBCASE("multi-head attention (kv = heads): no per-query-head dk, dv") {
    ModelShape mha = small;
    mha.kv_heads = 4;
    mha.gated_mlp = false;
    // q, k, v all 64 wide now.
    const std::uint64_t mha_attention = 2 * (64 + 64 + 64) + 2 * 64 + 4 * 4;
    const std::uint64_t layer = (norms + mha_attention + 2 * 160 + 2 * 64 + 2 * (2 * 4)) * T;
    const std::uint64_t flash_backward = 2 * (64 + 2 * 64) + 4 * 64 + 4 * 4;  // 656 > MLP's 640
    const std::uint64_t transient = (2 * 2 * 64 + flash_backward) * T;
    const PhaseBytes got = ActivationTerm<LibTorch>{}(mha, lora_qv);
    CHECK(got[Phase::backward_bottom].count() == layer + transient + fixed);
  }
}

TEST_CASE("ActivationTerm: full fine-tuning under hf-peft") {
  Step full = lora_qv;
  full.mode = Mode::full;
  // Norms with a trainable weight also save the bf16 pre-weight copy.
  const std::uint64_t norm = 4 * 64 + 4 + 2 * 64;
  const std::uint64_t attention = 2 * (64 + 32 + 32) + 2 * 64 + 4 * 4;
  const std::uint64_t mlp = 3 * 2 * 160;
  // Trainable weights save their inputs once per distinct input: q/k/v (h), gate/up (h), down (i);
  // o_proj's input is the attention output, already saved.
  const std::uint64_t inputs = 2 * 64 + 2 * 64 + 2 * 160;
  const std::uint64_t layer = (2 * norm + attention + mlp + inputs) * T;
  const std::uint64_t transient = (2 * 2 * 64 + 3 * 2 * 160) * T;
  const std::uint64_t head = (norm + 2 * 64) * T;  // final norm + lm_head's input
  const std::uint64_t fixed = 4 * 8 * T + 2 * 2 * 8 * 16;
  const std::uint64_t embedding_backward = 4 * 64 * T;  // fp32 per-token accumulation

  check_phases(ActivationTerm<HfPeft>{}(small, full), 3 * layer + head + fixed, 3 * layer + head + fixed,
               3 * layer + transient + fixed, layer + transient + fixed + embedding_backward, 0);
}

TEST_CASE("LogitsTerm: bytes per logits element") {
  const std::uint64_t elements = T * 1000;  // tokens x vocab

  SUBCASE("hf-peft, bf16: logits + fp32 copy + fp32 log-softmax; 12 B at the loss backward") {
    check_phases(LogitsTerm<HfPeft>{}(small, lora_qv), (2 + 4 + 4) * elements, 12 * elements, 0, 0, 0);
  }
  SUBCASE("hf-peft, bf16, logits kept by the caller: 2 more bytes from the loss backward to the step") {
    Step s = lora_qv;
    s.logits_retained = true;
    check_phases(LogitsTerm<HfPeft>{}(small, s), (2 + 4 + 4) * elements, (12 + 2) * elements, 2 * elements,
                 2 * elements, 2 * elements);
  }
  SUBCASE("libtorch, bf16: straight into cross_entropy; 6 B at the loss backward") {
    check_phases(LogitsTerm<LibTorch>{}(small, lora_qv), (2 + 2) * elements, 6 * elements, 0, 0, 0);
    Step s = lora_qv;
    s.logits_retained = true;
    check_phases(LogitsTerm<LibTorch>{}(small, s), (2 + 2) * elements, (6 + 2) * elements, 2 * elements,
                 2 * elements, 2 * elements);
  }
  SUBCASE("fp32 model: no copy to make, the loss is fp32 on both stacks") {
    Step s = lora_qv;
    s.precision = Precision::fp32;
    check_phases(LogitsTerm<HfPeft>{}(small, s), (4 + 4) * elements, 12 * elements, 0, 0, 0);
    check_phases(LogitsTerm<LibTorch>{}(small, s), (4 + 4) * elements, 12 * elements, 0, 0, 0);
  }
  SUBCASE("the logits term is the same in full fine-tuning and under checkpointing") {
    Step s = lora_qv;
    s.mode = Mode::full;
    s.gradient_checkpointing = true;
    check_phases(LogitsTerm<HfPeft>{}(small, s), 10 * elements, 12 * elements, 0, 0, 0);
  }
}

TEST_CASE("WorkspaceTerm: the measured cuBLAS workspaces in every phase") {
  // Two 32 MiB workspaces (main thread and autograd thread) on both stacks; HF's Python step holds
  // 1 MiB more (measured: context_allocated in tests/data/hf_steps.jsonl, 68157440 B).
  const std::uint64_t hf = 65ULL * 1024 * 1024;
  const std::uint64_t lean = 64ULL * 1024 * 1024;
  check_phases(WorkspaceTerm<HfPeft>{}(small, lora_qv), hf, hf, hf, hf, hf);
  check_phases(WorkspaceTerm<LibTorch>{}(small, Step{.mode = Mode::full}), lean, lean, lean, lean, lean);
}

TEST_CASE("the standard terms model CostTerm and carry their names") {
  CHECK(ParameterTerm<HfPeft>::name == "parameters");
  CHECK(ActivationTerm<HfPeft>::name == "activations");
  CHECK(LogitsTerm<LibTorch>::name == "logits");
  CHECK(WorkspaceTerm<LibTorch>::name == "workspace");
  CHECK(CostTerm<ParameterTerm<HfPeft>>);
  CHECK(CostTerm<ActivationTerm<LibTorch>>);
  CHECK(CostTerm<LogitsTerm<HfPeft>>);
  CHECK(CostTerm<WorkspaceTerm<LibTorch>>);
}

TEST_CASE("block_slack follows the caching allocator's block rules") {
  using vramfit::detail::block_slack;
  constexpr std::uint64_t mib = 1ULL << 20;
  CHECK(block_slack(1000) == 24);  // small pool: 512 B rounding only
  CHECK(block_slack(512) == 0);
  // Qwen2.5-0.5B's MLP tensors at 2048 tokens: 2048 x 4864 x 2 B = 19,922,944 B, a segment of
  // 20 MiB leaves exactly 1 MiB, which is not split off (a split needs more than 1 MiB).
  CHECK(block_slack(19922944) == mib);
  CHECK(block_slack(39845888) == 0);              // 38 MiB: a multiple of 2 MiB
  CHECK(block_slack(10 * mib + 1) == 511);        // 512 B rounding; 2 MiB rounding leaves > 1 MiB: split
  CHECK(block_slack(11 * mib + mib / 2) == mib / 2);
  // Under 10 MiB: cut from 20 MiB segments. 7 MiB: two per segment, 6 MiB left: split.
  CHECK(block_slack(7 * mib) == 0);
  // 6.5 MiB: three per segment, 0.5 MiB left goes with the last: shared over the three.
  CHECK(block_slack(6 * mib + mib / 2) == (mib / 2 + 2) / 3);
}

TEST_CASE("ExpectedSlackTerm: the slack of every live tensor, by phase") {
  using vramfit::detail::ExpectedSlackTerm;
  // Qwen2.5-0.5B, LoRA on q_proj,v_proj, 1 x 2048 tokens: the three MLP tensors of each of the
  // 24 layers carry 1 MiB each; they are live through the forward and the top of the backward.
  const ModelShape qwen = *vramfit::find_preset("Qwen2.5-0.5B");
  const Step s{.batch = 1, .seq = 2048};
  const PhaseBytes slack = ExpectedSlackTerm<HfPeft>{}(qwen, s);
  CHECK(slack[Phase::loss_backward].count() >= 3ULL * 24 * (1ULL << 20));
  CHECK(slack[Phase::backward_top].count() >= 3ULL * 24 * (1ULL << 20));
  CHECK(slack[Phase::backward_bottom].count() < slack[Phase::backward_top].count());  // one layer left
  CHECK(slack[Phase::optimizer_step].count() < (1ULL << 20));                         // LoRA: no weight-sized grads
  // At 4096 tokens those tensors are 38 MiB, a multiple of 2 MiB: almost no slack.
  const PhaseBytes even = ExpectedSlackTerm<HfPeft>{}(qwen, Step{.batch = 1, .seq = 4096});
  CHECK(even[Phase::loss_backward].count() < slack[Phase::loss_backward].count() / 4);
}

TEST_CASE("block_slack_bound: the most a live block can hold beyond its request") {
  using vramfit::detail::block_slack_bound;
  constexpr std::uint64_t mib = 1ULL << 20;
  CHECK(block_slack_bound(1) == 511);               // round_size: at least 512 B
  CHECK(block_slack_bound(1000) == 24);             // small pool: split whenever 512 B remain
  CHECK(block_slack_bound(mib) == 0);               // kSmallSize itself is a small request
  CHECK(block_slack_bound(mib + 1) == 511 + mib);   // large pool: up to 1 MiB left unsplit
  CHECK(block_slack_bound(19922944) == mib);        // whatever the expected rule says (here 1 MiB too)
  CHECK(block_slack_bound(39845888) == mib);        // a cached block may leave 1 MiB where a fresh segment leaves none
}

TEST_CASE("AllocatorSlackTerm bounds the expected slack at every phase") {
  using vramfit::detail::ExpectedSlackTerm;
  for (const char* name : {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B"})
    for (const Mode mode : {Mode::lora, Mode::full})
      for (const bool checkpointing : {false, true})
        for (const std::uint64_t seq : {512ULL, 2048ULL, 4096ULL}) {
          const ModelShape m = *vramfit::find_preset(name);
          const Step s{.batch = 2, .seq = seq, .mode = mode, .gradient_checkpointing = checkpointing};
          const PhaseBytes bound = AllocatorSlackTerm<HfPeft>{}(m, s);
          const PhaseBytes expected = ExpectedSlackTerm<HfPeft>{}(m, s);
          const PhaseBytes lean = AllocatorSlackTerm<LibTorch>{}(m, s);
          const PhaseBytes lean_expected = ExpectedSlackTerm<LibTorch>{}(m, s);
          CAPTURE(name);
          CAPTURE(seq);
          for (Phase p : all_phases) {
            CHECK(bound[p] >= expected[p]);
            CHECK(lean[p] >= lean_expected[p]);
          }
        }
  // A model whose every tensor is under 1 MiB: only the 512 B rounding, and hf-peft's 1 MiB
  // cuBLASLt workspace of the autograd thread.
  const ModelShape tiny{.vocab = 256, .hidden = 64, .intermediate = 128, .layers = 2, .heads = 4, .kv_heads = 4};
  const PhaseBytes rounding = AllocatorSlackTerm<LibTorch>{}(tiny, Step{.batch = 1, .seq = 16});
  for (Phase p : all_phases) CHECK(rounding[p].count() < 64 * 512);
  CHECK(AllocatorSlackTerm<HfPeft>{}(tiny, Step{.batch = 1, .seq = 16})[Phase::forward].count() >= (1ULL << 20));
}
