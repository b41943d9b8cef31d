#pragma once
/// @file config_json.hpp
/// Reads a Hugging Face `config.json` (Llama, Qwen2, Mistral) into a `ModelShape`. Needs
/// nlohmann-json (target `vramfit::json`); not included by the umbrella header.
///
/// Defaults for absent fields follow the transformers config classes
/// (src/transformers/models/{llama,qwen2,mistral}/configuration_*.py in huggingface/transformers):
/// - `tie_word_embeddings`: false for LlamaConfig, Qwen2Config and MistralConfig.
/// - `num_key_value_heads`: null means `num_attention_heads` (all three classes). When the field
///   is absent LlamaConfig does the same, but Qwen2Config would take 32 and MistralConfig 8, the
///   defaults of their Qwen2-7B-beta / Mistral-7B templates; vramfit takes `num_attention_heads`
///   for every type (the larger, safe figure for a hand-written config that omits it).
/// - `head_dim`: null or absent means `hidden_size / num_attention_heads`.
/// - q/k/v biases: Qwen2Attention always has them; Llama has them (and an o_proj bias) when
///   `attention_bias` is true (default false); Mistral never.
/// - The MLP of all three is gated (`down(act(gate(x)) * up(x))`) whatever `hidden_act` names, so
///   `gated_mlp` is always true; `hidden_act` is only type-checked. Llama's `mlp_bias: true` is
///   refused: `ModelShape` has no MLP biases, and dropping them would under-count.
/// Multimodal configs (a `text_config` under an unsupported `model_type`) are refused too: their
/// vision tower is not modelled.

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vramfit/detail/json_describe.hpp"
#include "vramfit/error.hpp"
#include "vramfit/model.hpp"

namespace vramfit {

namespace detail::hf {

/// The architectures vramfit reads: `model_type` and the class named in `architectures`.
struct Architecture {
  std::string_view model_type;
  std::string_view causal_lm_class;
};
inline constexpr std::array<Architecture, 3> supported_architectures = {
    Architecture{"llama", "LlamaForCausalLM"}, Architecture{"qwen2", "Qwen2ForCausalLM"},
    Architecture{"mistral", "MistralForCausalLM"}};

inline std::string supported_list() {
  std::string out;
  for (const auto& a : supported_architectures) {
    if (!out.empty()) out += ", ";
    out += a.model_type;
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

/// The supported model_type of this config, from `model_type` or else `architectures`.
inline std::string_view model_type(const Reader& r, const nlohmann::json& config) {
  if (const auto type = r.optional_string("model_type")) {
    for (const auto& a : supported_architectures)
      if (*type == a.model_type) return a.model_type;
    std::string message = "unsupported model_type '" + *type + "' (supported: " + supported_list() + ")";
    if (config.contains("text_config"))
      message += "; this looks like a multimodal config, whose vision tower vramfit does not model";
    r.fail("model_type", message);
  }
  const auto* architectures = r.find("architectures");
  if (architectures != nullptr) {
    if (!architectures->is_array()) r.fail("architectures", "must be an array of class names, got " + describe_json(*architectures));
    for (const auto& name : *architectures) {
      if (!name.is_string()) r.fail("architectures", "must be an array of class names, got " + describe_json(name));
      for (const auto& a : supported_architectures)
        if (name.get_ref<const std::string&>() == a.causal_lm_class) return a.model_type;
    }
  }
  std::string classes;
  for (const auto& a : supported_architectures) {
    if (!classes.empty()) classes += ", ";
    classes += a.causal_lm_class;
  }
  r.fail("model_type", "is missing and architectures names none of " + classes + " (supported: " +
                           supported_list() + ")");
}

/// The config.json field that a `validate(ModelShape)` error names.
inline std::string_view json_name(std::string_view shape_field) {
  constexpr std::array<std::array<std::string_view, 2>, 7> names = {{{"vocab", "vocab_size"},
                                                                     {"hidden", "hidden_size"},
                                                                     {"intermediate", "intermediate_size"},
                                                                     {"layers", "num_hidden_layers"},
                                                                     {"heads", "num_attention_heads"},
                                                                     {"kv_heads", "num_key_value_heads"},
                                                                     {"head_dim", "head_dim"}}};
  for (const auto& n : names)
    if (n[0] == shape_field) return n[1];
  return shape_field;
}

}  // namespace detail::hf

/**
 * Reads the text of a Hugging Face `config.json` for a Llama, Qwen2 or Mistral model and returns
 * its validated shape. `source` names the text in errors ("config.json: hidden_size: ...").
 * Throws `InvalidInput` for malformed JSON, a missing or mistyped field, an unsupported
 * `model_type`, or an inconsistent shape (`validate`).
 *
 *     auto shape = vramfit::parse_hf_config(R"({"model_type": "llama", "vocab_size": 32000, ...})");
 */
inline ModelShape parse_hf_config(std::string_view json_text, std::string_view source = "config.json") {
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

  ModelShape m;
  m.vocab = r.required_integer("vocab_size");
  m.hidden = r.required_integer("hidden_size");
  m.intermediate = r.required_integer("intermediate_size");
  m.layers = r.required_integer("num_hidden_layers");
  m.heads = r.required_integer("num_attention_heads");
  m.kv_heads = r.optional_integer("num_key_value_heads").value_or(m.heads);
  m.head_dim = r.optional_integer("head_dim").value_or(0);
  if (r.find("head_dim") != nullptr && m.head_dim == 0) r.fail("head_dim", "must be positive, got 0");
  m.tied_embeddings = r.optional_bool("tie_word_embeddings", false);
  (void)r.optional_string("hidden_act");
  m.gated_mlp = true;
  if (type == "qwen2") {
    m.qkv_bias = true;
  } else if (type == "llama") {
    m.qkv_bias = r.optional_bool("attention_bias", false);
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
  } catch (const Overflow& e) {
    throw InvalidInput(source, std::string("the model is too large: ") + e.what());
  }
  return m;
}

/// Reads and parses a `config.json` file; errors name the path. An unreadable file is an
/// `InvalidInput` on "--config" with the path and the operating system's reason.
inline ModelShape load_hf_config(const std::filesystem::path& path) {
  const auto unreadable = [&](int error) {
    return InvalidInput("--config", "cannot read '" + path.string() + "': " + std::strerror(error));
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw unreadable(EISDIR);
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw unreadable(errno);
  std::string text;
  char buffer[1 << 14];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) throw unreadable(error);
  return parse_hf_config(text, path.string());
}

}  // namespace vramfit
