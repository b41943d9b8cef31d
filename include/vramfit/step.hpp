#pragma once
/// @file step.hpp
/// One fine-tuning step: batch, sequence, precision, full or LoRA, checkpointing, attention
/// backend, what the caller keeps alive, and whether the first step or the whole run is asked for.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "vramfit/model.hpp"
#include "vramfit/detail/enum_names.hpp"

namespace vramfit {

/// Storage type of the weights and activations (the model is loaded in this dtype).
enum class Precision : std::uint8_t { bf16, fp16, fp32 };
/// Full fine-tuning (every weight trains) or LoRA adapters on chosen projections.
enum class Mode : std::uint8_t { lora, full };
/// The scaled-dot-product-attention kernel. flash and mem_efficient are linear in sequence;
/// math materialises the (seq x seq) score matrix per head.
enum class Attention : std::uint8_t { flash, mem_efficient, math };
/// Which steps the peak is taken over: the first alone (no optimizer state exists before its
/// `step()`), or the whole run (`steady`: the largest peak of any step, the first included).
enum class PeakOver : std::uint8_t { first_step, steady };
/**
 * How the training state is laid out over `Step::world_size` data-parallel ranks, each running
 * its own micro-batch of `Step::batch` sequences (vramfit/sharding.hpp has the arithmetic):
 * - `none`: every rank holds everything; with more than one rank this is PyTorch DDP.
 * - `zero1`: AdamW's moments and temporaries are partitioned (ZeRO stage 1).
 * - `zero2`: the gradients too (ZeRO stage 2).
 * - `full`: the weights too, each layer gathered for its forward and backward (FSDP2
 *   `fully_shard`, FULL_SHARD, ZeRO stage 3).
 * - `hybrid`: `full` within groups of `Step::shard_group` ranks, replicated across groups
 *   (FSDP2 HSDP).
 */
enum class Sharding : std::uint8_t { none, zero1, zero2, full, hybrid };
/**
 * The optimizer the loop steps with (learning rate and betas do not change memory):
 * - `adamw`: AdamW, two moments per trainable parameter, foreach (hf-peft: torch.optim.AdamW, the
 *   CUDA default; the Trainer's `adamw_torch`. libtorch: torch::optim::AdamW, per tensor).
 * - `adamw_fused`: torch.optim.AdamW(fused=True), the Trainer's default `adamw_torch_fused`: the
 *   same moments, updated in place by one kernel, and a 4-byte step count per tensor on the GPU.
 * - `adafactor`: transformers' Adafactor as the Trainer builds it (`optim="adafactor"`: no first
 *   moment, factored second moments: a row and a column vector per matrix, fp32).
 * - `sgd_momentum`: torch.optim.SGD with momentum > 0, one buffer per trainable parameter.
 * - `sgd`: torch.optim.SGD without momentum (the Trainer's `sgd`), no state.
 * Sources and the closed form's figures: tests/validation/README.md#optimizers
 */
enum class Optimizer : std::uint8_t { adamw, sgd_momentum, sgd, adamw_fused, adafactor };

constexpr std::uint64_t element_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

VRAMFIT_ENUM_NAMES(Precision, "precision",
                   {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}, {Precision::fp32, "fp32"});
VRAMFIT_ENUM_NAMES(Mode, "mode", {Mode::lora, "lora"}, {Mode::full, "full"});
VRAMFIT_ENUM_NAMES(Attention, "attention backend",
                   {Attention::flash, "flash"}, {Attention::mem_efficient, "mem-efficient"},
                   {Attention::math, "math"});
VRAMFIT_ENUM_NAMES(Optimizer, "optimizer", {Optimizer::adamw, "adamw"}, {Optimizer::adamw_fused, "adamw-fused"},
                   {Optimizer::adafactor, "adafactor"}, {Optimizer::sgd_momentum, "sgd-momentum"},
                   {Optimizer::sgd, "sgd"});
VRAMFIT_ENUM_NAMES(PeakOver, "phase", {PeakOver::first_step, "first"}, {PeakOver::steady, "steady"});
/// The strategy's word ("hybrid" without its group size; `sharding_name` adds it).
VRAMFIT_ENUM_NAMES(Sharding, "sharding",
                   {Sharding::none, "none"}, {Sharding::zero1, "zero1"}, {Sharding::zero2, "zero2"},
                   {Sharding::full, "full"}, {Sharding::hybrid, "hybrid"});

constexpr std::string_view to_string(Precision p) { return detail::enum_name(p); }
constexpr std::string_view to_string(Mode m) { return detail::enum_name(m); }
constexpr std::string_view to_string(Attention a) { return detail::enum_name(a); }
constexpr std::string_view to_string(PeakOver p) { return detail::enum_name(p); }
constexpr std::string_view to_string(Optimizer o) { return detail::enum_name(o); }
constexpr std::string_view to_string(Sharding s) { return detail::enum_name(s); }

/// A set of projections (LoRA targets).
struct TargetSet {
  std::uint8_t bits = 0;

  constexpr TargetSet() = default;
  constexpr TargetSet(std::initializer_list<Module> modules) {
    for (Module m : modules) bits = static_cast<std::uint8_t>(bits | (1u << static_cast<unsigned>(m)));
  }
  [[nodiscard]] constexpr bool has(Module m) const { return (bits >> static_cast<unsigned>(m)) & 1u; }
  [[nodiscard]] constexpr bool empty() const { return bits == 0; }
  /// PEFT's default for Llama, Qwen2, Qwen3 and Mistral: q_proj and v_proj.
  static constexpr TargetSet peft_default() { return {Module::q_proj, Module::v_proj}; }
  static constexpr TargetSet attention() { return {Module::q_proj, Module::k_proj, Module::v_proj, Module::o_proj}; }
  static constexpr TargetSet all_linear() {
    return {Module::q_proj, Module::k_proj, Module::v_proj, Module::o_proj, Module::gate_proj, Module::up_proj,
            Module::down_proj};
  }
  friend constexpr bool operator==(TargetSet, TargetSet) = default;
};

/// LoRA adapters: rank, the projections they wrap and the dropout before each adapter (PEFT
/// defaults otherwise; alpha does not change memory). Dropout 0 is PEFT's nn.Identity; above 0
/// each adapter keeps its dropped input and a one-byte mask per element of it for backward.
struct Lora {
  std::uint64_t rank = 8;
  TargetSet targets = TargetSet::peft_default();
  double dropout = 0.0;  ///< in [0, 1); only whether it is above 0 changes memory
  friend constexpr bool operator==(const Lora&, const Lora&) = default;
};

/// One training step.
struct Step {
  std::uint64_t batch = 1;
  std::uint64_t seq = 2048;
  Precision precision = Precision::bf16;
  Mode mode = Mode::lora;
  Lora lora{};
  bool gradient_checkpointing = false;
  Attention attention = Attention::flash;
  bool logits_retained = false;  ///< the caller keeps the model output (and its logits) through backward
  Optimizer optimizer = Optimizer::adamw;
  /// Micro-batches per optimizer step (the Trainer's `gradient_accumulation_steps`; hf-trainer
  /// only): from the second on, every grad of the earlier ones is live through the forward.
  std::uint64_t grad_accum = 1;
  /// The weights' storage dtype where it differs from `precision` (hf-trainer: fp32 weights under
  /// autocast to `precision`, mixed precision); unset: `precision`.
  std::optional<Precision> weights{};
  PeakOver peak_over = PeakOver::steady;
  std::uint64_t world_size = 1;        ///< data-parallel ranks; `batch` is each rank's micro-batch
  Sharding sharding = Sharding::none;  ///< how the state is laid out over the ranks
  std::uint64_t shard_group = 0;       ///< `hybrid`: ranks per shard group (divides world_size); else 0

  /// batch x sequence.
  [[nodiscard]] constexpr std::uint64_t tokens() const { return detail::checked_mul(batch, seq); }
  /// Whether the projection `m` carries a LoRA adapter in this step.
  [[nodiscard]] constexpr bool adapted(Module m) const { return mode == Mode::lora && lora.targets.has(m); }
  /// Whether LoRA dropout is on (above 0): the adapters then save a mask and their own input copy.
  [[nodiscard]] constexpr bool lora_dropout() const { return mode == Mode::lora && lora.dropout > 0; }
  /// The weights' storage dtype.
  [[nodiscard]] constexpr Precision weight_precision() const { return weights.value_or(precision); }
  /// Whether the weights are stored wider than the activations run (fp32 weights under autocast).
  [[nodiscard]] constexpr bool mixed_precision() const { return weight_precision() != precision; }
  /// Whether this is one process on one GPU: a single rank with nothing sharded.
  [[nodiscard]] constexpr bool single_gpu() const { return world_size == 1 && sharding == Sharding::none; }
  /// How many ranks share the sharded state: world_size for zero1, zero2 and full, the group
  /// for hybrid, 1 for none.
  [[nodiscard]] constexpr std::uint64_t shard_count() const {
    switch (sharding) {
      case Sharding::none: return 1;
      case Sharding::hybrid: return shard_group;
      default: return world_size;
    }
  }

  /// Equal steps: every field, the weights compared by their dtype (unset is the precision's).
  friend constexpr bool operator==(const Step& a, const Step& b) {
    const auto fields = [](const Step& s) {
      return std::tie(s.batch, s.seq, s.precision, s.mode, s.lora, s.gradient_checkpointing, s.attention,
                      s.logits_retained, s.optimizer, s.grad_accum, s.peak_over, s.world_size, s.sharding,
                      s.shard_group);
    };
    return fields(a) == fields(b) && a.weight_precision() == b.weight_precision();
  }
};

/// The largest LoRA rank on `targets` of `model`: the smallest min(in, out) of the targeted
/// projections, and that projection (the first in module order). PEFT itself only asks for r > 0,
/// but an adapter B A of rank above min(in, out) is no longer low-rank: it has more parameters
/// than the full-rank update it stands for. `model` must be valid (`validate(model)`).
constexpr std::pair<std::uint64_t, Module> max_lora_rank(const ModelShape& model, TargetSet targets) {
  std::pair<std::uint64_t, Module> out{0, Module::q_proj};
  for (Module m : all_modules)
    if (targets.has(m) && model.has(m)) {
      const ModuleDims d = model.dims(m);
      const std::uint64_t r = d.in < d.out ? d.in : d.out;
      if (out.first == 0 || r < out.first) out = {r, m};
    }
  return out;
}

/// Throws `InvalidInput` naming the first bad field of `step` (checked against `model`, which must
/// be valid: `validate(model)`).
constexpr void validate(const Step& step, const ModelShape& model) {
  detail::require_range("batch", step.batch, 1, 1ULL << 20);
  detail::require_range("seq", step.seq, 1, 1ULL << 24);
  if (step.mode == Mode::lora) {
    if (step.lora.targets.empty()) throw InvalidInput("lora targets", "at least one projection is required");
    if (!model.gated_mlp && step.lora.targets.has(Module::gate_proj))
      throw InvalidInput("lora targets", "gate_proj is not in a model without a gated MLP");
    const auto [limit, projection] = max_lora_rank(model, step.lora.targets);
    if (step.lora.rank < 1 || step.lora.rank > limit) {
      const ModuleDims d = model.dims(projection);
      throw InvalidInput("lora rank", "must be between 1 and " + std::to_string(limit) + ", got " +
                                          std::to_string(step.lora.rank) + " (the smallest min(in, out) of the "
                                          "targeted projections, " + std::string(to_string(projection)) + " " +
                                          std::to_string(d.in) + " -> " + std::to_string(d.out) +
                                          "; a larger rank is not a low-rank adapter)");
    }
    if (!(step.lora.dropout >= 0 && step.lora.dropout < 1))  // NaN too
      throw InvalidInput("lora dropout", "must be at least 0 and below 1 (a probability)");
  }
  detail::require_range("grad accum", step.grad_accum, 1, 65536);
  if (step.mixed_precision() && !(step.weight_precision() == Precision::fp32 && step.precision != Precision::fp32))
    throw InvalidInput("weights", "mixed precision keeps fp32 weights under bf16 or fp16 autocast; got " +
                                      std::string(to_string(step.weight_precision())) + " weights with " +
                                      std::string(to_string(step.precision)) + " compute");
  detail::require_range("world size", step.world_size, 1, 65536);
  if (step.sharding == Sharding::hybrid) {
    if (step.shard_group == 0)
      throw InvalidInput("shard group", "hybrid sharding needs a shard group of at least 1 rank (hybrid:K)");
    if (step.shard_group > step.world_size || step.world_size % step.shard_group != 0)
      throw InvalidInput("shard group", "hybrid:" + std::to_string(step.shard_group) +
                                            " needs a shard group that divides the world size (" +
                                            std::to_string(step.world_size) + ")");
  } else if (step.shard_group != 0) {
    throw InvalidInput("shard group", "is only for hybrid sharding (hybrid:K), got " +
                                          std::to_string(step.shard_group) + " with " +
                                          std::string(to_string(step.sharding)));
  }
  (void)step.tokens();
}

// ---- parsing the words users type -------------------------------------------------------------

constexpr Precision parse_precision(std::string_view s, std::string_view field = "--precision") {
  return detail::parse_enum<Precision>(s, field);
}
constexpr Mode parse_mode(std::string_view s, std::string_view field = "--mode") {
  return detail::parse_enum<Mode>(s, field);
}
/// Also reads PyTorch's spellings of the memory-efficient kernel ("mem_efficient", "efficient").
constexpr Attention parse_attention(std::string_view s, std::string_view field = "--attention") {
  if (detail::iequals(s, "mem_efficient") || detail::iequals(s, "efficient")) return Attention::mem_efficient;
  return detail::parse_enum<Attention>(s, field);
}
/// Also reads the Trainer's `optim` names: adamw_torch_fused, adamw_torch, adafactor, sgd.
constexpr Optimizer parse_optimizer(std::string_view s, std::string_view field = "--optim") {
  if (detail::iequals(s, "adamw_torch_fused") || detail::iequals(s, "adamw_fused")) return Optimizer::adamw_fused;
  if (detail::iequals(s, "adamw_torch")) return Optimizer::adamw;
  if (detail::iequals(s, "sgd_momentum")) return Optimizer::sgd_momentum;
  return detail::parse_enum<Optimizer>(s, field);
}
constexpr PeakOver parse_peak_over(std::string_view s, std::string_view field = "--phase") {
  return detail::parse_enum<PeakOver>(s, field);
}
/// What `--sharding` says: the strategy and, for hybrid, the shard group size.
struct ShardingChoice {
  Sharding sharding = Sharding::none;
  std::uint64_t shard_group = 0;
  friend constexpr bool operator==(const ShardingChoice&, const ShardingChoice&) = default;
};
/// "none", "zero1", "zero2", "full" or "hybrid:K" (K ranks per shard group, at least 1). That K
/// divides the world size is checked by `validate`, which knows the world size.
constexpr ShardingChoice parse_sharding(std::string_view s, std::string_view field = "--sharding") {
  for (const auto& [k, name] : detail::EnumNames<Sharding>::names)
    if (k != Sharding::hybrid && detail::iequals(s, name)) return {k, 0};
  const std::string_view prefix = "hybrid:";
  if (s.size() >= prefix.size() && detail::iequals(s.substr(0, prefix.size()), prefix)) {
    const std::string_view digits = s.substr(prefix.size());
    std::uint64_t k = 0;
    bool whole = !digits.empty();
    for (char c : digits) {
      if (!detail::is_digit(c)) whole = false;
      else if (k <= 65536) k = k * 10 + static_cast<std::uint64_t>(c - '0');  // past 65536: too large anyway
    }
    if (!whole)
      throw InvalidInput(field, "hybrid takes its shard group size in ranks: hybrid:K with K a whole number, got '" +
                                    std::string(s) + "'");
    if (k == 0) throw InvalidInput(field, "hybrid:K needs a shard group of at least 1 rank, got '" + std::string(s) + "'");
    if (k > 65536) throw InvalidInput(field, "hybrid:K allows at most 65536 ranks per group, got '" + std::string(s) + "'");
    return {Sharding::hybrid, k};
  }
  if (detail::iequals(s, "hybrid"))
    throw InvalidInput(field, "hybrid needs its shard group size: hybrid:K (K ranks per group, dividing the world size)");
  throw InvalidInput(field, "unknown sharding '" + std::string(s) + "' (allowed: none, zero1, zero2, full, hybrid:K)");
}
/// "none", "zero1", "zero2", "full" or "hybrid:K": what `parse_sharding` reads back.
inline std::string sharding_name(const Step& s) {
  if (s.sharding != Sharding::hybrid) return std::string(to_string(s.sharding));
  return "hybrid:" + std::to_string(s.shard_group);
}

constexpr Module parse_module(std::string_view s, std::string_view field = "--lora-targets") {
  for (const auto& [m, name] : detail::EnumNames<Module>::names)
    if (detail::iequals(s, name)) return m;
  throw InvalidInput(field, "unknown module '" + std::string(s) + "' (allowed: " +
                                detail::enum_name_list<Module>(", ") + ", all-linear)");
}
/// "q_proj,v_proj", "all-linear" (also "all_linear"), or "attention" (q,k,v,o).
constexpr TargetSet parse_targets(std::string_view s, std::string_view field = "--lora-targets") {
  s = detail::trim(s);
  const std::string_view list = s;  // as typed, for messages
  if (detail::iequals(s, "all-linear") || detail::iequals(s, "all_linear")) return TargetSet::all_linear();
  if (detail::iequals(s, "attention")) return TargetSet::attention();
  TargetSet t;
  while (true) {
    const auto comma = s.find(',');
    const std::string_view word = detail::trim(s.substr(0, comma));
    if (word.empty()) throw InvalidInput(field, "empty module name in '" + std::string(list) + "'");
    const Module m = parse_module(word, field);
    t.bits = static_cast<std::uint8_t>(t.bits | (1u << static_cast<unsigned>(m)));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return t;
}
/// "q_proj,v_proj", or "all-linear" when every projection is there.
inline std::string to_string(TargetSet t) {
  if (t == TargetSet::all_linear()) return "all-linear";
  std::string out;
  for (Module m : all_modules)
    if (t.has(m)) {
      if (!out.empty()) out += ',';
      out += to_string(m);
    }
  return out;
}

}  // namespace vramfit
