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

/// The built-in shapes, one row each, in ModelShape's field order: vocab, hidden, intermediate,
/// layers, heads, kv_heads, head_dim, tied_embeddings, qkv_bias, gated_mlp, qk_norm (false, true,
/// false where left out).
inline constexpr std::array presets = {
    Preset{"SmolLM2-135M",    {49152, 576, 1536, 30, 9, 3, 64, true}},
    Preset{"SmolLM2-360M",    {49152, 960, 2560, 32, 15, 5, 64, true}},
    Preset{"SmolLM2-1.7B",    {49152, 2048, 8192, 24, 32, 32, 64, true}},
    Preset{"Qwen2.5-0.5B",    {151936, 896, 4864, 24, 14, 2, 64, true, true}},
    Preset{"Qwen2.5-1.5B",    {151936, 1536, 8960, 28, 12, 2, 128, true, true}},
    Preset{"Qwen2.5-3B",      {151936, 2048, 11008, 36, 16, 2, 128, true, true}},
    Preset{"Qwen2.5-7B",      {152064, 3584, 18944, 28, 28, 4, 128, false, true}},
    Preset{"Qwen3-0.6B",      {151936, 1024, 3072, 28, 16, 8, 128, true, false, true, true}},
    Preset{"Qwen3-8B",        {151936, 4096, 12288, 36, 32, 8, 128, false, false, true, true}},
    Preset{"Llama-3.2-1B",    {128256, 2048, 8192, 16, 32, 8, 64, true}},
    Preset{"Llama-3.2-3B",    {128256, 3072, 8192, 28, 24, 8, 128, true}},
    Preset{"Llama-3.1-8B",    {128256, 4096, 14336, 32, 32, 8, 128, false}},
    Preset{"Mistral-7B-v0.1", {32000, 4096, 14336, 32, 32, 8, 128, false}},
    Preset{"TinyLlama-1.1B",  {32000, 2048, 5632, 22, 32, 4, 64, false}},
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
