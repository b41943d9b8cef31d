#pragma once
/// @file config_json.hpp
/// Reads a Hugging Face `config.json` (Llama, Qwen2, Qwen3, Mistral) into an `HfConfig`: the `ModelShape`,
/// the weights' dtype and the attention window. Needs nlohmann-json (target `vramfit::json`); not
/// included by the umbrella header.
///
/// Defaults for absent fields follow the transformers config classes
/// (src/transformers/models/{llama,qwen2,qwen3,mistral}/configuration_*.py in huggingface/transformers):
/// - `tie_word_embeddings`: false for LlamaConfig, Qwen2Config, Qwen3Config and MistralConfig.
/// - `num_key_value_heads`: null means `num_attention_heads` (all three classes). When the field
///   is absent LlamaConfig does the same, but Qwen2Config would take 32 and MistralConfig 8, the
///   defaults of their Qwen2-7B-beta / Mistral-7B templates; vramfit takes `num_attention_heads`
///   for every type (the larger, safe figure for a hand-written config that omits it).
/// - `head_dim`: null or absent means `hidden_size / num_attention_heads`; for Qwen3 absent means
///   Qwen3Config's default, 128.
/// - q/k/v biases: Qwen2Attention always has them; Llama and Qwen3 have them (and an o_proj bias)
///   when `attention_bias` is true (default false); Mistral never.
/// - Qwen3: `q_norm` and `k_norm`, an RMSNorm over each head of q and of k (`ModelShape::qk_norm`).
/// - The MLP of all three is gated (`down(act(gate(x)) * up(x))`) whatever `hidden_act` names, so
///   `gated_mlp` is always true; `hidden_act` is only type-checked. Llama's `mlp_bias: true` is
///   refused: `ModelShape` has no MLP biases, and dropping them would under-count.
/// Multimodal configs (a `text_config` under an unsupported `model_type`) are refused too: their
/// vision tower is not modelled. So is every key that changes memory and that vramfit does not
/// model (`unmodelled_keys`: experts, quantization); a missing `model_type` is an error, not llama.
/// - `dtype` (transformers 4.56+) or `torch_dtype`: bfloat16, float16 or float32, in `HfConfig::dtype`.
/// - `sliding_window`: Mistral's (absent: 4096, null: none), Qwen2's and Qwen3's when
///   `use_sliding_window` and a layer uses it, in `HfConfig::sliding_window`; `validate(step, config)`
///   refuses a step it masks.
/// No key of these four types fuses projections (Phi-3's qkv_proj is another model_type).

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vramfit/detail/json_describe.hpp"
#include "vramfit/detail/read_file.hpp"
#include "vramfit/error.hpp"
#include "vramfit/model.hpp"
#include "vramfit/step.hpp"

namespace vramfit {

namespace detail::hf {

/// The `model_type`s vramfit reads.
inline constexpr std::array<std::string_view, 4> supported_model_types = {"llama", "qwen2", "qwen3", "mistral"};

inline std::string supported_list() {
  std::string out;
  for (const auto type : supported_model_types) {
    if (!out.empty()) out += ", ";
    out += type;
  }
  return out;
}

/// Reads fields of one JSON object; every error names "<source>: <field>".
class Reader {
public:
  Reader(const nlohmann::json& object, std::string_view source) : object_(object), source_(source) {}

  [[nodiscard]] std::string field(std::string_view key) const { return source_ + ": " + std::string(key); }
  [[noreturn]] void fail(std::string_view key, const std::string& message) const { throw InvalidInput(field(key), message); }

  /// The value of `key`, or nullptr when it is absent or JSON null.
  [[nodiscard]] const nlohmann::json* find(std::string_view key) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  /// A non-negative integer: JSON integers only, never 2.0, "2" or true.
  [[nodiscard]] std::uint64_t integer(std::string_view key, const nlohmann::json& v) const {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer()) {
      const auto n = v.get<std::int64_t>();
      if (n < 0) fail(key, "must be a non-negative integer, got " + v.dump());
      return static_cast<std::uint64_t>(n);
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      // The parser stores integers beyond 64 bits as floating point.
      if (std::isfinite(d) && d == std::floor(d) && d >= 18446744073709551616.0)
        fail(key, "is out of range (more than 64 bits), got " + v.dump());
      if (d < 0) fail(key, "must be a non-negative integer, got " + v.dump());
      fail(key, "must be an integer without a fraction or exponent, got " + v.dump());
    }
    fail(key, "must be an integer, got " + describe_json(v));
  }

  /// A required non-negative integer.
  [[nodiscard]] std::uint64_t required_integer(std::string_view key) const {
    const auto it = object_.find(key);
    if (it == object_.end()) fail(key, "is missing (a non-negative integer is required)");
    if (it->is_null()) fail(key, "must be an integer, got null");
    return integer(key, *it);
  }

  /// An optional non-negative integer (absent or null: nullopt).
  [[nodiscard]] std::optional<std::uint64_t> optional_integer(std::string_view key) const {
    if (const auto* v = find(key)) return integer(key, *v);
    return std::nullopt;
  }

  /// An optional boolean (absent or null: `fallback`).
  [[nodiscard]] bool optional_bool(std::string_view key, bool fallback) const {
    const auto* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + describe_json(*v));
    return v->get<bool>();
  }

  /// An optional string (absent or null: nullopt).
  [[nodiscard]] std::optional<std::string> optional_string(std::string_view key) const {
    const auto* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(key, "must be a string, got " + describe_json(*v));
    return v->get<std::string>();
  }

private:
  const nlohmann::json& object_;
  std::string source_;
};

/// The supported model_type of this config. A config without one is refused, not taken as llama:
/// transformers writes it into every config.json, and the type decides biases and the window.
inline std::string_view model_type(const Reader& r, const nlohmann::json& config) {
  const auto type = r.optional_string("model_type");
  if (!type)
    r.fail("model_type", "is missing (transformers writes it into every config.json; supported: " +
                             supported_list() + ")");
  for (const auto supported : supported_model_types)
    if (*type == supported) return supported;
  std::string message = "unsupported model_type '" + *type + "' (supported: " + supported_list() + ")";
  if (config.contains("text_config"))
    message += "; this looks like a multimodal config, whose vision tower vramfit does not model";
  r.fail("model_type", message);
}

/// Keys that signal a structure vramfit does not model, and what it is: a config that sets one
/// (to anything but null, 0 or false) is refused rather than predicted as a dense model. Mixture
/// of experts under Mixtral, Qwen2-MoE/Qwen3-MoE, OLMoE, DeepSeek and ERNIE names; quantized weights.
struct UnmodelledKey {
  std::string_view key;
  std::string_view what;
};
inline constexpr std::array<UnmodelledKey, 9> unmodelled_keys = {{
    {"num_local_experts", "mixture-of-experts layers"},
    {"num_experts", "mixture-of-experts layers"},
    {"n_routed_experts", "mixture-of-experts layers"},
    {"moe_num_experts", "mixture-of-experts layers"},
    {"n_shared_experts", "mixture-of-experts layers"},
    {"num_experts_per_tok", "mixture-of-experts layers"},
    {"moe_intermediate_size", "mixture-of-experts layers"},
    {"shared_expert_intermediate_size", "mixture-of-experts layers"},
    {"quantization_config", "quantized weights"},
}};

inline void refuse_unmodelled(const Reader& r) {
  for (const auto& [key, what] : unmodelled_keys) {
    const auto* v = r.find(key);
    if (v == nullptr || *v == 0 || *v == false) continue;
    r.fail(key, "is " + describe_json(*v) + ": " + std::string(what) +
                    " are not modelled; vramfit predicts dense, unquantized Llama, Qwen2, Qwen3 and Mistral models");
  }
}

/// The weights' dtype: `dtype` (transformers 4.56+) or `torch_dtype`, as transformers writes a
/// torch.dtype's name; nullopt when neither is there.
inline std::optional<Precision> dtype(const Reader& r) {
  const auto read = [&](std::string_view key) -> std::optional<Precision> {
    const auto name = r.optional_string(key);
    if (!name) return std::nullopt;
    if (*name == "bfloat16") return Precision::bf16;
    if (*name == "float16" || *name == "half") return Precision::fp16;
    if (*name == "float32" || *name == "float") return Precision::fp32;
    r.fail(key, "'" + *name + "' is not a dtype vramfit models (bfloat16, float16, float32)");
  };
  const auto given = read("dtype");
  const auto legacy = read("torch_dtype");
  if (given && legacy && *given != *legacy)
    r.fail("torch_dtype", "disagrees with dtype ('" + std::string(to_string(*legacy)) + "' against '" +
                              std::string(to_string(*given)) + "')");
  return given ? given : legacy;
}

/// The attention window some layer uses, as the transformers classes read it; nullopt when none.
inline std::optional<std::uint64_t> sliding_window(const Reader& r, const nlohmann::json& config,
                                                   std::string_view type, std::uint64_t layers) {
  if (type == "mistral") {
    // MistralConfig: absent means its default, 4096; null means full attention.
    if (!config.contains("sliding_window")) return 4096;
  } else if (type == "qwen2" || type == "qwen3") {
    // Qwen2Config and Qwen3Config: only with use_sliding_window, and only in the layers from max_window_layers on
    // (default 28), or those that layer_types names "sliding_attention".
    if (!r.optional_bool("use_sliding_window", false)) return std::nullopt;
    if (const auto* types = r.find("layer_types")) {
      if (!types->is_array()) r.fail("layer_types", "must be an array of strings, got " + describe_json(*types));
      bool sliding = false;
      for (const auto& t : *types) sliding = sliding || t == "sliding_attention";
      if (!sliding) return std::nullopt;
    } else if (r.optional_integer("max_window_layers").value_or(28) >= layers) {
      return std::nullopt;
    }
  } else {
    return std::nullopt;  // LlamaModel has no window: a sliding_window key is ignored there
  }
  const auto window = r.optional_integer("sliding_window");
  if (window && *window == 0) r.fail("sliding_window", "must be positive or null, got 0");
  return window;
}

/// Every field a `validate(ModelShape)` error can name, and its config.json key.
inline constexpr std::array<std::array<std::string_view, 2>, 7> shape_json_names = {{{"vocab", "vocab_size"},
                                                                                    {"hidden", "hidden_size"},
                                                                                    {"intermediate", "intermediate_size"},
                                                                                    {"layers", "num_hidden_layers"},
                                                                                    {"heads", "num_attention_heads"},
                                                                                    {"kv_heads", "num_key_value_heads"},
                                                                                    {"head_dim", "head_dim"}}};

/// The config.json field that a `validate(ModelShape)` error names.
inline std::string_view json_name(std::string_view shape_field) {
  for (const auto& n : shape_json_names)
    if (n[0] == shape_field) return n[1];
  return shape_field;
}

}  // namespace detail::hf

/// What a `config.json` says that changes memory: the shape, and the two settings that a `Step`
/// or a check takes from it.
struct HfConfig {
  ModelShape shape;
  /// The weights' dtype (`dtype`/`torch_dtype`), which `from_pretrained(..., dtype="auto")` loads
  /// them in; nullopt when the config names none. A caller without a precision of its own takes it
  /// for `Step::precision` (`step.precision = config.dtype.value_or(Precision::bf16)`).
  std::optional<Precision> dtype;
  /// The sliding attention window in tokens, where a layer uses one; nullopt when none does.
  std::optional<std::uint64_t> sliding_window;

  /// The shape alone, for code that needs no more (a `Step` built from the config should take
  /// `dtype`, and be checked by `validate(step, config)`).
  operator const ModelShape&() const { return shape; }  // NOLINT(google-explicit-constructor)
  friend bool operator==(const HfConfig&, const HfConfig&) = default;
};

/**
 * Checks `step` against `config.shape` (`validate(step, shape)`) and against the config's sliding
 * window: a sequence of `sliding_window` tokens or more is refused ("seq"). At that length
 * transformers stops passing `is_causal` to SDPA and builds an explicit (batch, 1, seq, seq)
 * window mask, which also rules out the flash kernel; neither is modelled.
 */
inline void validate(const Step& step, const HfConfig& config) {
  validate(step, config.shape);
  if (config.sliding_window && step.seq >= *config.sliding_window)
    throw InvalidInput("seq", "must be below the config's sliding_window (" + std::to_string(*config.sliding_window) +
                                  "), got " + std::to_string(step.seq) +
                                  ": from there transformers masks attention with an explicit window mask, which "
                                  "vramfit does not model");
}

/**
 * Reads the text of a Hugging Face `config.json` for a Llama, Qwen2 or Mistral model: its
 * validated shape, dtype and sliding window. `source` names the text in errors
 * ("config.json: hidden_size: ..."). Throws `InvalidInput` for malformed JSON, a missing or
 * mistyped field, a missing or unsupported `model_type`, a key of a structure not modelled
 * (mixture-of-experts layers, `quantization_config`), an unknown dtype, or an inconsistent or out-of-range shape
 * (`validate`).
 *
 *     const vramfit::HfConfig c = vramfit::parse_hf_config(R"({"model_type": "llama", "vocab_size": 32000, ...})");
 *     const vramfit::Step step{.precision = c.dtype.value_or(vramfit::Precision::bf16)};
 *     vramfit::validate(step, c);
 */
inline HfConfig parse_hf_config(std::string_view json_text, std::string_view source = "config.json") {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::exception& e) {
    // parse_error (with its line and column), or out_of_range for a number like 1e400.
    throw InvalidInput(source, std::string("malformed JSON: ") + e.what());
  }
  if (!config.is_object())
    throw InvalidInput(source, "must be a JSON object, got " + detail::describe_json(config));

  const detail::hf::Reader r(config, source);
  const std::string_view type = detail::hf::model_type(r, config);
  detail::hf::refuse_unmodelled(r);

  ModelShape m;
  m.vocab = r.required_integer("vocab_size");
  m.hidden = r.required_integer("hidden_size");
  m.intermediate = r.required_integer("intermediate_size");
  m.layers = r.required_integer("num_hidden_layers");
  m.heads = r.required_integer("num_attention_heads");
  m.kv_heads = r.optional_integer("num_key_value_heads").value_or(m.heads);
  m.head_dim = r.optional_integer("head_dim").value_or(0);
  if (type == "qwen3" && r.find("head_dim") == nullptr) m.head_dim = 128;  // Qwen3Config's default
  if (r.find("head_dim") != nullptr && m.head_dim == 0) r.fail("head_dim", "must be positive, got 0");
  m.tied_embeddings = r.optional_bool("tie_word_embeddings", false);
  (void)r.optional_string("hidden_act");
  m.gated_mlp = true;
  if (type == "qwen2") {
    m.qkv_bias = true;
  } else if (type == "llama" || type == "qwen3") {
    m.qkv_bias = r.optional_bool("attention_bias", false);
    m.qk_norm = type == "qwen3";
    if (r.optional_bool("mlp_bias", false))
      r.fail("mlp_bias", "true is not supported: vramfit's model shape has no MLP biases");
  } else {
    m.qkv_bias = false;
  }

  try {
    validate(m);
  } catch (const InvalidInput& e) {
    // Name the config.json field rather than the ModelShape member.
    std::string_view message = e.what();
    const std::string prefix = e.field() + ": ";
    if (message.substr(0, prefix.size()) == prefix) message.remove_prefix(prefix.size());
    r.fail(detail::hf::json_name(e.field()), std::string(message));
  }
  return {.shape = m, .dtype = detail::hf::dtype(r),
          .sliding_window = detail::hf::sliding_window(r, config, type, m.layers)};
}

/// Reads and parses a `config.json` file; errors name the path. An unreadable file is an
/// `InvalidInput` on "--config" with the path and the operating system's reason.
inline HfConfig load_hf_config(const std::filesystem::path& path) {
  // A config.json is a few KB.
  const std::string text = detail::read_bounded_file(path, "--config", std::size_t{4} << 20,
                                                     "larger than 4 MiB: not a config.json (those are a few KB)");
  return parse_hf_config(text, path.string());
}

}  // namespace vramfit
