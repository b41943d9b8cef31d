#pragma once
/// @file probe/reference_step.hpp
/// The reference training step: a Llama/Qwen-style decoder built in LibTorch from a `ModelShape`
/// with random weights, and one step (forward and loss, backward, AdamW) driven by a `Step`. The
/// `libtorch` profile models exactly the tensors this file creates; each op says what autograd
/// saves. Rules, per-op table and per-layer sums: tests/validation/README.md#the-reference-step

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"
#include "vramfit/model.hpp"
#include "vramfit/probe/meter.hpp"
#include "vramfit/step.hpp"

namespace vramfit::probe {

/// The RMSNorm implementation.
enum class Norm : std::uint8_t {
  /// `at::rms_norm` (`_fused_rms_norm` on CUDA): saves its input, weight and fp32 `rstd`.
  fused,
  /// Hugging Face's LlamaRMSNorm, op by op: saves the fp32 copy, the fp32 `rsqrt`, and the
  /// normalised copy when the weight trains.
  fp32_upcast,
};

constexpr std::string_view to_string(Norm n) { return n == Norm::fused ? "fused" : "fp32-upcast"; }

/// The memory knobs of the reference stack. The defaults are the lean `libtorch` stack.
struct ReferenceOptions {
  Norm norm = Norm::fused;
  /// dtype of the LoRA adapters (A, B, their grads and AdamW states). Empty: the model dtype.
  /// `at::kFloat` is PEFT's default: each adapted projection then keeps its own fp32 input copy.
  std::optional<at::ScalarType> adapter_dtype{};
  /// false: `cross_entropy` straight on the model-dtype logits; true: `logits.to(float)` first
  /// (Hugging Face's ForCausalLMLoss).
  bool loss_upcast = false;
  /// LoRA alpha; empty: 2 x rank. Only the value of the output changes, not memory.
  std::optional<double> lora_alpha{};
  /// RMSNorm epsilon.
  double rms_eps = 1e-6;
};

/// Peaks of one step, as absolute allocator figures (everything allocated before the step is in
/// them). `weights` is what was allocated when the step began: the parameters, the input ids,
/// and from the second step on the AdamW states and the cuBLAS workspaces that the first step
/// created.
struct StepMeasurement {
  Bytes weights;         ///< allocated bytes at the start of the step
  Bytes peak;            ///< the step's peak: the largest of the three phases
  Bytes forward_peak;    ///< forward pass, loss included
  Bytes backward_peak;   ///< `loss.backward()`
  Bytes optimizer_peak;  ///< `optimizer.step()` and `zero_grad(set_to_none)`
  Bytes reserved_peak;   ///< the largest reserved bytes of the three phases (segments held)
  std::uint64_t realised_seq = 0;  ///< width of the input ids the step ran on
  std::string attention_backend;   ///< what `at::_fused_sdp_choice` picked for layer 0 (`sdp_backend_name`)
};

/// The name of an `at::_fused_sdp_choice` result (`at::SDPBackend`: math 0, flash_attention 1,
/// efficient_attention 2, cudnn_attention 3): "math", "flash", "mem-efficient", "cudnn", or
/// "other(N)" for a backend this list does not know.
inline std::string sdp_backend_name(std::int64_t choice) {
  switch (choice) {
    case 0: return "math";
    case 1: return "flash";
    case 2: return "mem-efficient";
    case 3: return "cudnn";
    default: return "other(" + std::to_string(choice) + ")";
  }
}

/// Which scaled-dot-product-attention kernels may run (the global flags that
/// `torch.nn.attention.sdpa_kernel` sets in Python).
struct SdpFlags {
  bool flash = true;
  bool mem_efficient = true;
  bool math = true;
  bool cudnn = true;

  /// The flags in force now.
  static SdpFlags current() {
    const auto& ctx = at::globalContext();
    return {ctx.userEnabledFlashSDP(), ctx.userEnabledMemEfficientSDP(), ctx.userEnabledMathSDP(),
            ctx.userEnabledCuDNNSDP()};
  }
  /// Only the kernel of `a` enabled.
  static SdpFlags only(Attention a) {
    return {a == Attention::flash, a == Attention::mem_efficient, a == Attention::math, false};
  }
  /// Only cuDNN's kernel enabled.
  static SdpFlags only_cudnn() { return {false, false, false, true}; }

  void apply() const {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(flash);
    ctx.setSDPUseMemEfficient(mem_efficient);
    ctx.setSDPUseMath(math);
    ctx.setSDPUseCuDNN(cudnn);
  }
};

/// Sets the SDPA flags for its lifetime and restores the previous ones after (also on exceptions).
class SdpScope {
public:
  explicit SdpScope(SdpFlags flags) : saved_(SdpFlags::current()) { flags.apply(); }
  SdpScope(const SdpScope&) = delete;
  SdpScope& operator=(const SdpScope&) = delete;
  ~SdpScope() { saved_.apply(); }

private:
  SdpFlags saved_;
};

/// The ATen dtype of a vramfit precision.
constexpr at::ScalarType scalar_type(Precision p) {
  switch (p) {
    case Precision::bf16: return at::kBFloat16;
    case Precision::fp16: return at::kHalf;
    case Precision::fp32: return at::kFloat;
  }
  return at::kBFloat16;
}

/// "bf16", "fp16", "fp32" (the names `vramfit::to_string(Precision)` uses); "dtype(N)" otherwise.
inline std::string dtype_name(at::ScalarType t) {
  if (t == at::kBFloat16) return "bf16";
  if (t == at::kHalf) return "fp16";
  if (t == at::kFloat) return "fp32";
  return "dtype(" + std::to_string(static_cast<int>(t)) + ")";
}

class ReferenceModel;

namespace detail {

/// One linear projection of a layer: base weight (out x in), optional bias, optional LoRA pair.
struct Projection {
  torch::Tensor weight;
  torch::Tensor bias;    ///< undefined unless q/k/v with `qkv_bias`
  torch::Tensor lora_a;  ///< (rank x in), undefined when not adapted
  torch::Tensor lora_b;  ///< (out x rank)
};

struct LayerWeights {
  torch::Tensor input_norm;  ///< (hidden)
  torch::Tensor post_norm;   ///< (hidden)
  std::array<Projection, std::size(all_modules)> projections;  ///< indexed by `Module`

  [[nodiscard]] const Projection& operator[](Module m) const { return projections[static_cast<std::size_t>(m)]; }
  [[nodiscard]] Projection& operator[](Module m) { return projections[static_cast<std::size_t>(m)]; }
};

/// What a checkpointed layer needs to run again: its model and its index.
struct LayerCall {
  const ReferenceModel* model = nullptr;
  std::size_t index = 0;
};

/**
 * Gradient checkpointing of one decoder layer (the reentrant kind): the forward saves only the
 * layer input `x` and runs the layer without grad; the backward runs it again with grad and
 * back-propagates through it. `anchor`, a 0-dim tensor that requires grad, makes the node exist
 * when `x` does not require grad (layer 0 of LoRA).
 */
struct CheckpointedLayer : torch::autograd::Function<CheckpointedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& anchor, const LayerCall* call);
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs);
};

inline std::int64_t to_int64(std::uint64_t v, const char* field) {
  if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw InvalidInput(field, "is too large for a tensor dimension");
  return static_cast<std::int64_t>(v);
}

}  // namespace detail

/**
 * A decoder with random weights (N(0, 0.02), in the model dtype) on one CUDA device, its input
 * ids, and an AdamW optimizer over its trainable parameters, ready to run training steps. LoRA
 * freezes the base weights and adds A (N(0, 0.01)) and B (zeros) per targeted projection.
 *
 *     vramfit::probe::ReferenceModel model(vramfit::preset("SmolLM2-135M"), step);
 *     vramfit::probe::PeakMeter meter;
 *     auto first = model.measure_step(meter);    // creates the AdamW states
 *     auto second = model.measure_step(meter);
 */
class ReferenceModel {
public:
  /// Validates `model` and `step` (throws `InvalidInput`), builds the weights, the ids and the
  /// optimizer. Throws `std::logic_error` if the ids are not exactly batch x seq.
  ReferenceModel(const ModelShape& model, const Step& step, ReferenceOptions options = {}, int device = 0);

  ReferenceModel(const ReferenceModel&) = delete;  // checkpointed layers point back at the model
  ReferenceModel& operator=(const ReferenceModel&) = delete;
  ReferenceModel(ReferenceModel&&) = delete;
  ReferenceModel& operator=(ReferenceModel&&) = delete;
  ~ReferenceModel() = default;

  /// One training step: forward and loss, `loss.backward()`, `optimizer.step()`,
  /// `optimizer.zero_grad(set_to_none=true)`.
  void run_step() { (void)step_impl(nullptr); }

  /// One training step, with the allocator peak of each phase (reset before it, read after it).
  /// `meter` must be on the model's device.
  StepMeasurement measure_step(PeakMeter& meter) {
    if (meter.device() != device_index_)
      throw InvalidInput("device", "the meter is on device " + std::to_string(meter.device()) +
                                       ", the model on device " + std::to_string(device_index_));
    return step_impl(&meter);
  }

  /// Called with a label at named points of each step, for an allocator trace
  /// (`AllocatorTraceRecorder::mark`): "stepN.forward", ".forward.layerJ" and ".forward.layer_endJ"
  /// around each decoder layer, ".backward", ".backward.layerJ" when the grad of layer J's output
  /// arrives (before a checkpointed layer's recompute), ".optimizer", ".zero_grad". The labels are
  /// those of tests/validation/trace_capture.py --marks. Empty: no marks, no hooks.
  using Marker = std::function<void(const std::string&)>;
  void set_marker(Marker marker) { marker_ = std::move(marker); }

  /// Width of the input ids (`ids.size(1)`): always the requested sequence length.
  [[nodiscard]] std::uint64_t realised_seq() const { return static_cast<std::uint64_t>(ids_.size(1)); }
  /// The kernel `at::_fused_sdp_choice` picked for layer 0's q, k, v in the last step (for a
  /// checkpointed step: in the grad-enabled recomputation); empty before the first step.
  [[nodiscard]] const std::string& attention_backend() const { return attention_backend_; }
  /// The loss of the last step (NaN before the first).
  [[nodiscard]] double last_loss() const { return last_loss_; }
  /// Elements of the trainable parameters (what AdamW keeps two states for).
  [[nodiscard]] std::uint64_t trainable_parameters() const {
    std::uint64_t n = 0;
    for (const auto& p : trainable_) n += static_cast<std::uint64_t>(p.numel());
    return n;
  }
  [[nodiscard]] at::ScalarType dtype() const { return dtype_; }
  [[nodiscard]] at::ScalarType adapter_dtype() const { return adapter_dtype_; }
  [[nodiscard]] int device() const { return device_index_; }

private:
  friend struct detail::CheckpointedLayer;

  StepMeasurement step_impl(PeakMeter* meter);
  torch::Tensor forward_and_loss(torch::Tensor& logits_kept);
  torch::Tensor layer_forward(const torch::Tensor& x, std::size_t index) const;
  torch::Tensor norm(const torch::Tensor& x, const torch::Tensor& weight) const;
  torch::Tensor project(const torch::Tensor& x, const detail::Projection& p) const;
  torch::Tensor rotate_half(const torch::Tensor& t) const;
  void make_rotary_tables();
  [[nodiscard]] const torch::Tensor& lm_head() const { return model_.tied_embeddings ? embedding_ : lm_head_; }

  ModelShape model_;
  Step step_;
  ReferenceOptions options_;
  int device_index_;
  torch::Device device_;
  at::ScalarType dtype_;
  at::ScalarType adapter_dtype_;
  double lora_scale_ = 1.0;

  // Shapes as tensor dimensions.
  std::int64_t batch_, seq_, hidden_, heads_, kv_heads_, head_dim_, vocab_;

  torch::Tensor embedding_;   // E
  torch::Tensor lm_head_;     // W_lm, undefined when tied
  torch::Tensor final_norm_;  // (hidden)
  std::vector<detail::LayerWeights> layers_;
  std::vector<detail::LayerCall> calls_;  // one per layer, for checkpointing
  torch::Tensor anchor_;                  // see CheckpointedLayer; undefined without checkpointing
  torch::Tensor ids_;                     // (batch x seq) int64, also the labels
  torch::Tensor labels_;                  // ids_ viewed as (batch*seq)
  std::vector<torch::Tensor> trainable_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;

  // Rotary tables (seq x head_dim, model dtype, no grad): made at the start of each step's
  // forward, dropped after its backward (checkpointed layers need them again in backward).
  torch::Tensor cos_, sin_;

  mutable std::string attention_backend_;
  double last_loss_ = std::numeric_limits<double>::quiet_NaN();

  Marker marker_;
  int steps_run_ = 0;
  std::string mark_prefix_;  // "stepN" of the step running
  void mark(const std::string& what) const {
    if (marker_) marker_(mark_prefix_ + "." + what);
  }
};

// ---- construction -------------------------------------------------------------------------------

inline ReferenceModel::ReferenceModel(const ModelShape& model, const Step& step, ReferenceOptions options, int device)
    : model_(model),
      step_(step),
      options_(options),
      device_index_(device),
      device_(torch::kCUDA, detail::checked_device(device)),  // InvalidInput("device") without such a CUDA device
      dtype_(scalar_type(step.precision)),
      adapter_dtype_(options.adapter_dtype.value_or(scalar_type(step.precision))) {
  const DeviceScope on_device(device_index_);
  validate(model_);
  validate(step_, model_);
  if (model_.head_dimension() % 2 != 0)
    throw InvalidInput("head_dim", "must be even for rotary embeddings, got " + std::to_string(model_.head_dimension()));
  if (model_.qk_norm)
    throw InvalidInput("qk_norm", "the reference step has no q/k norms (Qwen3); its Llama layer would not be that model");
  if (step_.precision == Precision::fp32 && step_.attention == Attention::flash)
    throw InvalidInput("attention", "flash attention runs only in bf16 or fp16; use mem-efficient or math for fp32");
  if (adapter_dtype_ != at::kFloat && adapter_dtype_ != at::kBFloat16 && adapter_dtype_ != at::kHalf)
    throw InvalidInput("adapter dtype", "must be fp32, bf16 or fp16, got " + dtype_name(adapter_dtype_));

  batch_ = detail::to_int64(step_.batch, "batch");
  seq_ = detail::to_int64(step_.seq, "seq");
  hidden_ = detail::to_int64(model_.hidden, "hidden");
  heads_ = detail::to_int64(model_.heads, "heads");
  kv_heads_ = detail::to_int64(model_.kv_heads, "kv_heads");
  head_dim_ = detail::to_int64(model_.head_dimension(), "head_dim");
  vocab_ = detail::to_int64(model_.vocab, "vocab");
  const std::int64_t rank = detail::to_int64(step_.lora.rank, "lora rank");
  const bool lora = step_.mode == Mode::lora;
  lora_scale_ = options_.lora_alpha.value_or(2.0 * static_cast<double>(rank)) / static_cast<double>(rank);

  torch::NoGradGuard no_grad;
  const auto opts = torch::TensorOptions().dtype(dtype_).device(device_);
  const auto adapter_opts = torch::TensorOptions().dtype(adapter_dtype_).device(device_);
  // A base weight: N(0, 0.02) in the model dtype; trains in full fine-tuning only.
  auto weight = [&](std::int64_t rows, std::int64_t cols) {
    torch::Tensor w = torch::randn({rows, cols}, opts);
    w.mul_(0.02);
    w.requires_grad_(!lora);
    if (!lora) trainable_.push_back(w);
    return w;
  };
  auto vec = [&](std::int64_t n, bool ones) {
    torch::Tensor v = ones ? torch::ones({n}, opts) : torch::randn({n}, opts).mul_(0.02);
    v.requires_grad_(!lora);
    if (!lora) trainable_.push_back(v);
    return v;
  };

  embedding_ = weight(vocab_, hidden_);
  layers_.resize(static_cast<std::size_t>(model_.layers));
  for (auto& layer : layers_) {
    layer.input_norm = vec(hidden_, true);
    layer.post_norm = vec(hidden_, true);
    for (Module m : all_modules) {
      if (!model_.has(m)) continue;
      const auto dims = model_.dims(m);
      const auto out = detail::to_int64(dims.out, "projection width");
      const auto in = detail::to_int64(dims.in, "projection width");
      auto& p = layer[m];
      p.weight = weight(out, in);
      if (model_.qkv_bias && (m == Module::q_proj || m == Module::k_proj || m == Module::v_proj))
        p.bias = vec(out, false);
      if (step_.adapted(m)) {
        p.lora_a = torch::randn({rank, in}, adapter_opts);
        p.lora_a.mul_(0.01);
        p.lora_a.requires_grad_(true);
        p.lora_b = torch::zeros({out, rank}, adapter_opts);
        p.lora_b.requires_grad_(true);
        trainable_.push_back(p.lora_a);
        trainable_.push_back(p.lora_b);
      }
    }
  }
  final_norm_ = vec(hidden_, true);
  if (!model_.tied_embeddings) lm_head_ = weight(vocab_, hidden_);

  calls_.reserve(layers_.size());
  for (std::size_t l = 0; l < layers_.size(); ++l) calls_.push_back({this, l});
  if (step_.gradient_checkpointing) anchor_ = torch::zeros({}, opts).requires_grad_(true);

  // Exactly batch x seq ids: no tokenizer, no truncation, no padding. The labels are the ids
  // themselves, over every position (a shift would not change memory).
  ids_ = torch::randint(vocab_, {batch_, seq_}, torch::TensorOptions().dtype(at::kLong).device(device_));
  labels_ = ids_.view({-1});
  if (realised_seq() != step_.seq || ids_.size(0) != batch_)
    throw std::logic_error("reference step: the ids are " + std::to_string(ids_.size(0)) + " x " +
                           std::to_string(ids_.size(1)) + ", not the requested " + std::to_string(batch_) + " x " +
                           std::to_string(seq_));

  // Created once per run; its states appear in the first step() (zeros_like per parameter).
  optimizer_ = std::make_unique<torch::optim::AdamW>(trainable_, torch::optim::AdamWOptions(1e-4));
}

// ---- the step -------------------------------------------------------------------------------------

inline StepMeasurement ReferenceModel::step_impl(PeakMeter* meter) {
  const DeviceScope on_device(device_index_);
  StepMeasurement out;
  if (meter != nullptr) {
    meter->synchronize();
    out.weights = meter->allocated();
  }
  // Peak of one phase: reset before, read after (synchronized by the meter).
  auto phase = [meter, &out](auto&& body) -> Bytes {
    if (meter == nullptr) {
      body();
      return Bytes{};
    }
    meter->reset();
    body();
    meter->synchronize();
    out.reserved_peak = max(out.reserved_peak, meter->peak_reserved());
    return meter->peak_allocated();
  };
  // The rotary tables live from the forward to the end of the backward, even if a phase throws.
  struct DropRotary {
    ReferenceModel& m;
    ~DropRotary() { m.cos_ = torch::Tensor(); m.sin_ = torch::Tensor(); }
  } drop_rotary{*this};

  const SdpScope attention(SdpFlags::only(step_.attention));  // for the whole step, recompute included
  torch::Tensor loss;
  torch::Tensor logits_kept;  // holds the logits through backward when the step says the caller does
  mark_prefix_ = "step" + std::to_string(++steps_run_);
  mark("forward");
  out.forward_peak = phase([&] { loss = forward_and_loss(logits_kept); });
  mark("backward");
  out.backward_peak = phase([&] {
    loss.backward();
    last_loss_ = loss.item<double>();
    loss = torch::Tensor();
    logits_kept = torch::Tensor();
    cos_ = torch::Tensor();
    sin_ = torch::Tensor();
  });
  mark("optimizer");
  out.optimizer_peak = phase([&] {
    optimizer_->step();
    mark("zero_grad");
    optimizer_->zero_grad(/*set_to_none=*/true);  // grads become undefined: freed
  });
  out.peak = max(max(out.forward_peak, out.backward_peak), out.optimizer_peak);
  out.realised_seq = realised_seq();
  out.attention_backend = attention_backend_;
  return out;
}

inline void ReferenceModel::make_rotary_tables() {
  // Standard RoPE (theta 10000), computed in fp32 and stored in the model dtype. No grad: the
  // rotary multiplies save these two tables (shared by every layer) and nothing else.
  torch::NoGradGuard no_grad;
  const auto f32 = torch::TensorOptions().dtype(at::kFloat).device(device_);
  const torch::Tensor exponent = torch::arange(0, head_dim_, 2, f32).div(static_cast<double>(head_dim_));
  const torch::Tensor inv_freq = torch::pow(10000.0, exponent).reciprocal();
  const torch::Tensor positions = torch::arange(seq_, f32);
  const torch::Tensor freqs = torch::outer(positions, inv_freq);  // (seq, head_dim/2)
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1);     // (seq, head_dim)
  cos_ = angles.cos().to(dtype_);
  sin_ = angles.sin().to(dtype_);
}

inline torch::Tensor ReferenceModel::forward_and_loss(torch::Tensor& logits_kept) {
  make_rotary_tables();
  // Embedding: in full fine-tuning EmbeddingBackward saves the indices (the ids, alive anyway);
  // in LoRA E is frozen, no node, the output does not require grad.
  torch::Tensor hidden = at::embedding(embedding_, ids_);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    mark("forward.layer" + std::to_string(l));
    hidden = step_.gradient_checkpointing ? detail::CheckpointedLayer::apply(hidden, anchor_, &calls_[l])
                                          : layer_forward(hidden, l);
    if (marker_) {
      mark("forward.layer_end" + std::to_string(l));
      if (hidden.requires_grad())
        hidden.register_hook([this, label = mark_prefix_ + ".backward.layer" + std::to_string(l)](auto&&) {
          marker_(label);
        });
    }
  }
  // Final norm: as any norm (see `norm`).
  torch::Tensor normed = norm(hidden, final_norm_);
  hidden = torch::Tensor();
  torch::Tensor loss;
  {
    // lm_head: saves `normed` only when the head weight trains (full fine-tuning); the logits
    // themselves are saved by nothing.
    torch::Tensor logits = at::linear(normed, lm_head());
    normed = torch::Tensor();
    torch::Tensor flat = logits.view({-1, vocab_});
    // loss_upcast: an fp32 copy (ToCopyBackward saves nothing) that log_softmax reads.
    if (options_.loss_upcast) flat = flat.to(at::kFloat);
    // cross_entropy = log_softmax + nll_loss. log_softmax saves its output (logits dtype, or fp32
    // when upcast); nll_loss saves that same output and the targets (the ids). In backward
    // nll_loss makes a grad of the logits' shape, log_softmax another: with the saved output,
    // three logits-sized tensors (6 B/element in bf16, 12 in fp32) live together.
    loss = at::cross_entropy_loss(flat, labels_);
    if (step_.logits_retained) logits_kept = logits;
  }  // the logits (and the fp32 copy) are freed here unless kept
  return loss;
}

inline torch::Tensor ReferenceModel::norm(const torch::Tensor& x, const torch::Tensor& weight) const {
  if (options_.norm == Norm::fused) {
    // `_fused_rms_norm` (2.8+ on CUDA, weight dtype == input dtype): saves x, the weight and rstd
    // (fp32, batch x seq x 1) when x or the weight requires grad.
    const std::int64_t shape[] = {hidden_};
    return at::rms_norm(x, at::IntArrayRef(shape), weight, options_.rms_eps);
  }
  // Hugging Face's LlamaRMSNorm, op by op:
  torch::Tensor xf = x.to(at::kFloat);                      // ToCopyBackward: saves nothing (a no-op for fp32 x)
  torch::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);  // pow saves xf (fp32); mean saves sizes
  xf = xf * torch::rsqrt(var + options_.rms_eps);            // rsqrt saves its result (fp32, per token); mul saves xf and it
  return weight * xf.to(x.scalar_type());  // ToCopy: nothing; mul saves the weight, and the normed copy if the weight trains
}

inline torch::Tensor ReferenceModel::project(const torch::Tensor& x, const detail::Projection& p) const {
  // Base: mm/addmm save x only when the weight trains (full), the weight when x requires grad.
  // The bias saves nothing.
  torch::Tensor y = at::linear(x, p.weight, p.bias);
  if (!p.lora_a.defined()) return y;
  // LoRA, as PEFT: each adapted projection casts its own input (a separate copy per projection
  // when the adapter dtype differs; ToCopyBackward saves nothing) ...
  torch::Tensor xa = x.scalar_type() == adapter_dtype_ ? x : x.to(adapter_dtype_);
  // ... linear(xa, A) saves xa (A trains) and A; linear(t, B) saves t (rank wide) and B; the
  // scale multiplies by a number (saves nothing).
  torch::Tensor t = at::linear(xa, p.lora_a);
  xa = torch::Tensor();
  torch::Tensor delta = at::linear(t, p.lora_b).mul(lora_scale_);
  t = torch::Tensor();
  y = y + delta;  // promotes to fp32 when the adapters are fp32: a transient, nothing saved
  if (y.scalar_type() != x.scalar_type()) y = y.to(x.scalar_type());  // PEFT's result.to(torch_result_dtype)
  return y;
}

inline torch::Tensor ReferenceModel::rotate_half(const torch::Tensor& t) const {
  // slice, neg and cat save nothing (sizes only).
  const std::int64_t half = head_dim_ / 2;
  return at::cat({t.slice(-1, half, head_dim_).neg(), t.slice(-1, 0, half)}, -1);
}

/// One decoder layer; locals are released right after their last use. What each op saves (norms
/// and projections: see `norm` and `project`; SDPA: q, k, v, its output and the fp32 logsumexp;
/// SiLU and the product: g, s and u): tests/validation/README.md#the-reference-step
inline torch::Tensor ReferenceModel::layer_forward(const torch::Tensor& x, std::size_t index) const {
  const auto& w = layers_[index];
  torch::Tensor n1 = norm(x, w.input_norm);
  torch::Tensor q = project(n1, w[Module::q_proj]);
  torch::Tensor k = project(n1, w[Module::k_proj]);
  torch::Tensor v = project(n1, w[Module::v_proj]);
  n1 = torch::Tensor();
  q = q.view({batch_, seq_, heads_, head_dim_}).transpose(1, 2);
  k = k.view({batch_, seq_, kv_heads_, head_dim_}).transpose(1, 2);
  v = v.view({batch_, seq_, kv_heads_, head_dim_}).transpose(1, 2);
  q = q * cos_ + rotate_half(q) * sin_;
  k = k * cos_ + rotate_half(k) * sin_;
  const bool gqa = kv_heads_ != heads_;
  if (index == 0) {
    // Under forced flags SDPA throws "Invalid backend" when the one enabled kernel does not take
    // these inputs (torch 2.11's memory-efficient kernel refuses grouped-query attention): say so.
    try {
      attention_backend_ =
          sdp_backend_name(at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, gqa));
    } catch (const c10::Error& e) {
      throw InvalidInput("attention", std::string("no ") + std::string(to_string(step_.attention)) +
                                          " attention kernel takes these inputs on this stack" +
                                          (gqa ? " (grouped-query attention: kv_heads < heads)" : "") + ": " +
                                          e.what_without_backtrace());
    }
  }
  torch::Tensor a = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                     /*scale=*/std::nullopt, /*enable_gqa=*/gqa);
  q = torch::Tensor();
  k = torch::Tensor();
  v = torch::Tensor();
  a = a.transpose(1, 2).reshape({batch_, seq_, heads_ * head_dim_});
  torch::Tensor h = x + project(a, w[Module::o_proj]);
  a = torch::Tensor();
  torch::Tensor n2 = norm(h, w.post_norm);
  torch::Tensor p;
  if (model_.gated_mlp) {
    torch::Tensor g = project(n2, w[Module::gate_proj]);
    torch::Tensor u = project(n2, w[Module::up_proj]);
    n2 = torch::Tensor();
    p = at::silu(g) * u;
  } else {
    torch::Tensor u = project(n2, w[Module::up_proj]);
    n2 = torch::Tensor();
    p = at::gelu(u);
  }
  torch::Tensor m = project(p, w[Module::down_proj]);
  p = torch::Tensor();
  return h + m;
}

// ---- checkpointing ----------------------------------------------------------------------------------

inline torch::Tensor detail::CheckpointedLayer::forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                        const torch::Tensor& /*anchor*/, const LayerCall* call) {
  // IValue holds no pointers: the address travels as an integer. The call outlives the graph
  // (the model owns it).
  ctx->saved_data["call"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(call));
  ctx->save_for_backward({x});
  torch::NoGradGuard no_grad;  // Function::apply already disables grad; said again for the reader
  return call->model->layer_forward(x, call->index);
}

inline torch::autograd::variable_list detail::CheckpointedLayer::backward(torch::autograd::AutogradContext* ctx,
                                                                          torch::autograd::variable_list grad_outputs) {
  const auto* call = reinterpret_cast<const LayerCall*>(static_cast<std::intptr_t>(ctx->saved_data["call"].toInt()));
  const bool x_needs_grad = ctx->needs_input_grad(0);
  torch::Tensor x = ctx->get_saved_variables().at(0).detach();
  torch::Tensor x_grad;
  {
    torch::AutoGradMode enable_grad(true);
    x.requires_grad_(x_needs_grad);
    torch::Tensor out = call->model->layer_forward(x, call->index);
    // Accumulates into the parameters' and adapters' .grad, and into x.grad.
    if (out.requires_grad()) torch::autograd::backward({out}, {grad_outputs.at(0)});
  }
  if (x_needs_grad) x_grad = x.grad();
  return {x_grad, torch::Tensor(), torch::Tensor()};  // one per forward argument: x, anchor, call
}

}  // namespace vramfit::probe
