// A consumer of vramfit's json component: reads a Hugging Face config.json and predicts a step.
#include <vramfit/config_json.hpp>
#include <vramfit/vramfit.hpp>

#include <fmt/core.h>

int main() {
  const vramfit::HfConfig config = vramfit::parse_hf_config(R"({
    "model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
    "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "torch_dtype": "bfloat16"})");
  const auto prediction = vramfit::HfPeftPredictor{}.predict(config.shape, {.batch = 1, .seq = 1024});
  fmt::print("json consumer: {} parameters, peak {}\n", config.shape.parameters(), prediction.peak.count());
  return prediction.peak.count() > 0 ? 0 : 1;
}
