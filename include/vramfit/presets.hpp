#pragma once
/// @file presets.hpp
/// Built-in shapes of popular models, from each model's published `config.json` on the Hugging
/// Face hub (fields vocab_size, hidden_size, intermediate_size, num_hidden_layers,
/// num_attention_heads, num_key_value_heads, head_dim, tie_word_embeddings; q/k/v bias from the
/// architecture: Qwen2 has it, Llama and Mistral do not).

#include <array>
#include <optional>
#include <string_view>

#include "vramfit/model.hpp"

namespace vramfit {

/// A named built-in model shape.
struct Preset {
  std::string_view name;  ///< the hub name, as users type it (matched case-insensitively)
  ModelShape shape;
};

inline constexpr std::array presets = {
    Preset{"SmolLM2-135M", {.vocab = 49152, .hidden = 576, .intermediate = 1536, .layers = 30, .heads = 9,
                            .kv_heads = 3, .head_dim = 64, .tied_embeddings = true}},
    Preset{"SmolLM2-360M", {.vocab = 49152, .hidden = 960, .intermediate = 2560, .layers = 32, .heads = 15,
                            .kv_heads = 5, .head_dim = 64, .tied_embeddings = true}},
    Preset{"SmolLM2-1.7B", {.vocab = 49152, .hidden = 2048, .intermediate = 8192, .layers = 24, .heads = 32,
                            .kv_heads = 32, .head_dim = 64, .tied_embeddings = true}},
    Preset{"Qwen2.5-0.5B", {.vocab = 151936, .hidden = 896, .intermediate = 4864, .layers = 24, .heads = 14,
                            .kv_heads = 2, .head_dim = 64, .tied_embeddings = true, .qkv_bias = true}},
    Preset{"Qwen2.5-1.5B", {.vocab = 151936, .hidden = 1536, .intermediate = 8960, .layers = 28, .heads = 12,
                            .kv_heads = 2, .head_dim = 128, .tied_embeddings = true, .qkv_bias = true}},
    Preset{"Qwen2.5-3B", {.vocab = 151936, .hidden = 2048, .intermediate = 11008, .layers = 36, .heads = 16,
                          .kv_heads = 2, .head_dim = 128, .tied_embeddings = true, .qkv_bias = true}},
    Preset{"Qwen2.5-7B", {.vocab = 152064, .hidden = 3584, .intermediate = 18944, .layers = 28, .heads = 28,
                          .kv_heads = 4, .head_dim = 128, .tied_embeddings = false, .qkv_bias = true}},
    Preset{"Llama-3.2-1B", {.vocab = 128256, .hidden = 2048, .intermediate = 8192, .layers = 16, .heads = 32,
                            .kv_heads = 8, .head_dim = 64, .tied_embeddings = true}},
    Preset{"Llama-3.2-3B", {.vocab = 128256, .hidden = 3072, .intermediate = 8192, .layers = 28, .heads = 24,
                            .kv_heads = 8, .head_dim = 128, .tied_embeddings = true}},
    Preset{"Llama-3.1-8B", {.vocab = 128256, .hidden = 4096, .intermediate = 14336, .layers = 32, .heads = 32,
                            .kv_heads = 8, .head_dim = 128, .tied_embeddings = false}},
    Preset{"Mistral-7B-v0.1", {.vocab = 32000, .hidden = 4096, .intermediate = 14336, .layers = 32, .heads = 32,
                               .kv_heads = 8, .head_dim = 128, .tied_embeddings = false}},
    Preset{"TinyLlama-1.1B", {.vocab = 32000, .hidden = 2048, .intermediate = 5632, .layers = 22, .heads = 32,
                              .kv_heads = 4, .head_dim = 64, .tied_embeddings = false}},
};

/// The preset of this name (case-insensitive), if any.
constexpr std::optional<ModelShape> find_preset(std::string_view name) {
  for (const auto& p : presets)
    if (detail::iequals(p.name, name)) return p.shape;
  return std::nullopt;
}

/// The preset of this name; throws `InvalidInput` (field `field`) listing the known names.
inline ModelShape preset(std::string_view name, std::string_view field = "--model") {
  if (auto s = find_preset(name)) return *s;
  std::string known;
  for (const auto& p : presets) {
    if (!known.empty()) known += ", ";
    known += p.name;
  }
  throw InvalidInput(field, "unknown model '" + std::string(name) + "' (built-in: " + known + ")");
}

}  // namespace vramfit
