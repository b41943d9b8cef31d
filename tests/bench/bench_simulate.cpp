// Catch2 benchmark of the exact path: estimate (hf-peft) and estimate (libtorch) replay every allocator
// request of a build and two steps through the allocator model, once per segment placement. No target; its own file, so the recorded programs'
// header does not sit in the closed form's translation unit.
#include <catch2/catch.hpp>

#include "vramfit/presets.hpp"
#include "vramfit/estimate.hpp"

TEST_CASE("estimate (hf-peft)") {
  // The exact path replays every allocator request of the build and two steps.
  const vramfit::ModelShape qwen = *vramfit::find_preset("Qwen2.5-0.5B");
  const vramfit::ModelShape llama = *vramfit::find_preset("Llama-3.2-1B");
  const vramfit::Step lora{.batch = 1, .seq = 4096, .lora = {.rank = 8, .targets = vramfit::TargetSet::attention()}};
  BENCHMARK("estimate (hf-peft): Qwen2.5-0.5B LoRA q,k,v,o seq 4096 (24 layers)") {
    return vramfit::estimate(qwen, lora).simulation->peak.count();
  };
  BENCHMARK("estimate (hf-peft): Llama-3.2-1B LoRA q,k,v,o seq 4096 (16 layers)") {
    return vramfit::estimate(llama, lora).simulation->peak.count();
  };
  vramfit::Step full = lora;
  full.mode = vramfit::Mode::full;
  BENCHMARK("estimate (hf-peft): Qwen2.5-0.5B full fine-tuning seq 4096") {
    return vramfit::estimate(qwen, full).simulation->peak.count();
  };
  BENCHMARK("estimate (libtorch): Qwen2.5-0.5B LoRA q,k,v,o seq 4096") {
    return vramfit::estimate(qwen, lora, vramfit::Stack::libtorch).simulation->peak.count();
  };
}

