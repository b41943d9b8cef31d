// parse_hf_config on arbitrary text: a config whose shape passes `validate` (and whose sliding
// window, if any, is positive), or InvalidInput naming "config.json: <field>" (or Overflow).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vramfit/config_json.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vramfit::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto config =
      vramfit::fuzz::attempt([&] { return vramfit::parse_hf_config(text, "config.json"); }, "config.json");
  if (!config) return 0;
  const vramfit::ModelShape* m = &config->shape;
  vramfit::fuzz::must_succeed([&] { vramfit::validate(*m); return 0; }, "validate(parse_hf_config(...))");
  check(!config->sliding_window || *config->sliding_window >= 1, "a sliding window is positive");
  check(m->gated_mlp, "an HF config's MLP is gated");
  check(m->head_dimension() >= 1 && m->kv_heads <= m->heads && m->heads % m->kv_heads == 0, "a consistent head layout");
  return 0;
}
