#pragma once
/// @file profiles.hpp
/// Stack profiles: the figures that depend on the software stack rather than on the model. The
/// same model keeps different tensors under HF transformers + PEFT than under a lean LibTorch
/// step; a profile says which, and the cost terms read nothing else.
///
/// A profile is a type with these static members (checked by the `StackProfile` concept):
///   name                  the stack's name, as the CLI's --stack takes it
///   norm                  what RMSNorm saves for backward (`NormSaves`)
///   adapter_bytes         bytes per LoRA adapter element; 0 means the model's own dtype
///   loss_upcast           whether the logits are cast to fp32 before cross-entropy
///   adamw                 how AdamW sizes its temporaries (`AdamWTemporaries`)
///   token_buffer_bytes    int64 id/label buffers per token (input ids, labels, shifted labels)
///   workspace_bytes       allocations that live for the whole run outside the model (cuBLAS workspaces)

#include <concepts>
#include <cstdint>
#include <string_view>

namespace vramfit {

/// What an RMSNorm keeps for its backward, per token.
enum class NormSaves : std::uint8_t {
  /// HF LlamaRMSNorm / Qwen2RMSNorm: `hidden.to(float32)`, then x * rsqrt(var + eps): the fp32
  /// copy (4 B x h) and rsqrt (4 B) are saved; with a trainable weight also the pre-weight copy
  /// in the model dtype.
  fp32_upcast,
  /// A fused `at::rms_norm`: the input in the model dtype and the fp32 inverse RMS per token.
  fused,
};

/// Temporaries of AdamW's update, on top of weights, grads and both moments.
enum class AdamWTemporaries : std::uint8_t {
  /// torch.optim.AdamW with foreach (the default on CUDA): `_foreach_sqrt(exp_avg_sqs)` makes one
  /// temporary per parameter of the group, all alive at once: the size of all trainable params.
  foreach_group,
  /// LibTorch's torch::optim::AdamW loops tensor by tensor: `(exp_avg_sq.sqrt() / c).add_(eps)`
  /// keeps two temporaries the size of the tensor being updated; the largest tensor bounds it.
  per_tensor,
};

template <class P>
concept StackProfile = requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::norm } -> std::convertible_to<NormSaves>;
  { P::adapter_bytes } -> std::convertible_to<std::uint64_t>;
  { P::loss_upcast } -> std::convertible_to<bool>;
  { P::adamw } -> std::convertible_to<AdamWTemporaries>;
  { P::token_buffer_bytes } -> std::convertible_to<std::uint64_t>;
  { P::workspace_bytes } -> std::convertible_to<std::uint64_t>;
};

namespace profiles {

/**
 * HF transformers (>= 4.46, SDPA attention) with PEFT LoRA defaults and torch.optim.AdamW.
 * Read from the sources, then checked against measured steps (tests/data/hf_*.jsonl):
 * - LlamaRMSNorm / Qwen2RMSNorm upcast to fp32 and save that copy.
 * - PEFT keeps lora_A / lora_B in fp32 and each adapted Linear casts its own input with
 *   `x.to(lora_A.weight.dtype)`: q, k and v each save a separate fp32 copy of the same input.
 * - ForCausalLMLoss does `logits.float()` before cross_entropy (12 B per logits element at the
 *   backward of log-softmax, 8 in the forward); the bf16 logits are freed before backward unless
 *   the caller keeps the model output.
 * - SDPA with `enable_gqa` (no repeat_kv copies) when no attention mask is passed.
 * - Labels: input ids, labels, labels padded by one and the contiguous shifted labels (int64).
 * - Workspaces: 65 MiB held by the caching allocator once a step has run, measured on an H200
 *   (torch 2.11): two 32 MiB cuBLAS workspaces (the main thread's handle and the autograd
 *   engine's) and 1 MiB more.
 */
struct HfPeft {
  static constexpr std::string_view name = "hf-peft";
  static constexpr NormSaves norm = NormSaves::fp32_upcast;
  static constexpr std::uint64_t adapter_bytes = 4;
  static constexpr bool loss_upcast = true;
  static constexpr AdamWTemporaries adamw = AdamWTemporaries::foreach_group;
  static constexpr std::uint64_t token_buffer_bytes = 4 * 8;
  static constexpr std::uint64_t workspace_bytes = 65ULL << 20;
};

/**
 * The Probe's lean LibTorch reference step (include/vramfit/probe/reference_step.hpp with its
 * default ReferenceOptions): fused at::rms_norm, adapters in the model dtype reading their input
 * directly, bf16 logits straight into cross_entropy (6 B per element at its backward),
 * torch::optim::AdamW (per tensor), labels are the input ids. Workspaces: 64 MiB measured (the
 * probe's step-2 baseline), the two cuBLAS handles' 32 MiB each.
 */
struct LibTorch {
  static constexpr std::string_view name = "libtorch";
  static constexpr NormSaves norm = NormSaves::fused;
  static constexpr std::uint64_t adapter_bytes = 0;
  static constexpr bool loss_upcast = false;
  static constexpr AdamWTemporaries adamw = AdamWTemporaries::per_tensor;
  static constexpr std::uint64_t token_buffer_bytes = 8;
  static constexpr std::uint64_t workspace_bytes = 64ULL << 20;
};

static_assert(StackProfile<HfPeft>);
static_assert(StackProfile<LibTorch>);

}  // namespace profiles
}  // namespace vramfit
