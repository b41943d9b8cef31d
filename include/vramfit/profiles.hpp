#pragma once
/// @file profiles.hpp
/// Stack profiles: the figures that depend on the software stack rather than on the model (what
/// RMSNorm saves, adapter dtype, loss upcast, AdamW's temporaries, token buffers, workspaces); the
/// cost terms read nothing else. Sources: tests/validation/README.md#stack-profiles

#include <concepts>
#include <cstdint>
#include <string_view>

namespace vramfit {

/// What an RMSNorm keeps for its backward, per token.
enum class NormSaves : std::uint8_t {
  /// HF LlamaRMSNorm: the fp32 copy (4h) and rsqrt (4 B); the normed copy when the weight trains.
  fp32_upcast,
  /// A fused `at::rms_norm`: the input in the model dtype and the fp32 inverse RMS per token.
  fused,
};

/// Temporaries of AdamW's update, on top of weights, grads and both moments.
enum class AdamWTemporaries : std::uint8_t {
  /// torch.optim.AdamW with foreach (the CUDA default): the size of all trainable parameters.
  foreach_group,
  /// LibTorch's torch::optim::AdamW, tensor by tensor: twice the largest trainable tensor.
  per_tensor,
};

/// The figures of a stack profile (see the members); the cost terms read nothing else.
struct StackFigures {
  NormSaves norm;                   ///< what an RMSNorm saves for its backward
  std::uint64_t adapter_bytes;      ///< bytes per adapter element; 0: the model dtype
  bool loss_upcast;                 ///< the logits are cast to fp32 before the loss
  AdamWTemporaries adamw;           ///< temporaries of AdamW's update
  std::uint64_t token_buffer_bytes; ///< per token: ids, labels and their copies
  std::uint64_t workspace_bytes;    ///< cuBLAS workspaces, held for the whole run
  /// A cuBLASLt workspace the autograd thread may take on top (measured with q/k/v bias and
  /// checkpointing), kept by the process for the steps after
  std::uint64_t autograd_workspace_bytes = 0;
  /// The forward runs under torch.autocast at the step's precision (the Trainer's bf16/fp16), its
  /// outputs converted to fp32 (accelerate); the terms then follow autocast's casts
  /// (tests/validation/README.md#hf-trainer).
  bool autocast = false;
  /// The grads are clipped by norm before the optimizer (the Trainer's max_grad_norm = 1.0):
  /// `clip_grad_norm_`'s foreach norms, a 0-d tensor per trainable tensor, and their stack.
  bool clips_grad_norm = false;
};

/// A stack profile: a static `name` (as `--stack` takes it) and its static `figures`.
template <class P>
concept StackProfile = requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::figures } -> std::convertible_to<StackFigures>;
};

namespace profiles {

/**
 * HF transformers (SDPA) + PEFT LoRA defaults + torch.optim.AdamW in a plain loop: fp32 RMSNorm
 * copies, fp32 adapters casting their own inputs, `logits.float()` before the loss, four int64
 * label buffers, 65 MiB of cuBLAS workspaces (measured on the H200). Checked against
 * tests/data/hf_*.jsonl.
 */
struct HfPeft {
  static constexpr std::string_view name = "hf-peft";
  /// Where the figures were measured (the built-in step programs were recorded there too).
  static constexpr std::string_view recorded_gpu = "NVIDIA H200";
  static constexpr std::string_view recorded_software = "torch 2.11.0+cu130, transformers 5.17.0, peft 0.21.0";
  static constexpr StackFigures figures{.norm = NormSaves::fp32_upcast, .adapter_bytes = 4, .loss_upcast = true,
                                        .adamw = AdamWTemporaries::foreach_group, .token_buffer_bytes = 4 * 8,
                                        .workspace_bytes = 65ULL << 20, .autograd_workspace_bytes = 1ULL << 20};
};

/**
 * The Probe's lean LibTorch reference step (probe/reference_step.hpp, default options): fused
 * at::rms_norm, adapters in the model dtype, bf16 logits into cross_entropy, per-tensor AdamW,
 * the ids as labels, 64 MiB of cuBLAS workspaces (measured on the H200).
 */
struct LibTorch {
  static constexpr std::string_view name = "libtorch";
  static constexpr std::string_view recorded_gpu = "NVIDIA H200";
  static constexpr std::string_view recorded_software = "LibTorch 2.11.0";
  static constexpr StackFigures figures{.norm = NormSaves::fused, .adapter_bytes = 0, .loss_upcast = false,
                                        .adamw = AdamWTemporaries::per_tensor, .token_buffer_bytes = 8,
                                        .workspace_bytes = 64ULL << 20};
};

/**
 * transformers.Trainer + PEFT as users run it: the hf-peft model code, under accelerate's autocast
 * at the step's precision (bf16/fp16; fp32: none), with the Trainer's optimizers (default
 * `adamw_torch_fused`), gradient accumulation and fp32 weights (mixed precision). The closed form
 * bounds it; no step program is recorded yet. Checked against tests/data/trainer_steps_h100.jsonl.
 */
struct HfTrainer {
  static constexpr std::string_view name = "hf-trainer";
  static constexpr std::string_view recorded_gpu = "NVIDIA H100 80GB HBM3";
  static constexpr std::string_view recorded_software =
      "torch 2.11.0+cu130, transformers 5.17.0, peft 0.21.0, accelerate 1.15.0";
  static constexpr StackFigures figures{.norm = NormSaves::fp32_upcast, .adapter_bytes = 4, .loss_upcast = true,
                                        .adamw = AdamWTemporaries::foreach_group, .token_buffer_bytes = 4 * 8,
                                        .workspace_bytes = 65ULL << 20, .autograd_workspace_bytes = 1ULL << 20,
                                        .autocast = true, .clips_grad_norm = true};
};

static_assert(StackProfile<HfPeft>);
static_assert(StackProfile<HfTrainer>);
static_assert(StackProfile<LibTorch>);

}  // namespace profiles
}  // namespace vramfit
