// Catch2 benchmarks of the exact path: estimate (hf-peft) and estimate (libtorch) replay every allocator
// request of a build and two steps through the allocator model, once per segment placement; with a
// budget, `estimate` also decides whether the run fits; `fit_verdict` decides alone (no peaks), and
// `max_batch` / `max_seq` search by that verdict. Targets (issue 13): a fit decision under 20 ms,
// max_batch under 100 ms for a 24-layer
// model on a 2-core machine. Its own file, so the simulation's headers do not sit in the
// closed form's translation unit.
#include <catch2/catch.hpp>

#include "vramfit/presets.hpp"
#include "vramfit/estimate.hpp"

namespace {
constexpr std::uint64_t GiB = 1ULL << 30;
// The 24-layer steps the fit and search benchmarks time: LoRA q,k,v,o at seq 4096, full at 2048.
vramfit::Step lora_4096() {
  return {.batch = 1, .seq = 4096, .lora = {.rank = 8, .targets = vramfit::TargetSet::attention()}};
}
vramfit::Step full_2048() {
  vramfit::Step s = lora_4096();
  s.mode = vramfit::Mode::full;
  s.seq = 2048;
  return s;
}
vramfit::RunContext with_budget(std::uint64_t bytes) {
  vramfit::RunContext c;
  c.budget = vramfit::Bytes(bytes);
  return c;
}
}  // namespace

TEST_CASE("estimate (hf-peft)", "[simulate]") {
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

TEST_CASE("fits (hf-peft 24 layers)", "[simulate]") {
  // `fits`: the estimate under a budget (its peaks and its verdict simulated at every placement),
  // and `fit_verdict`: the verdict alone.
  const vramfit::ModelShape qwen = *vramfit::find_preset("Qwen2.5-0.5B");
  const vramfit::Step lora = lora_4096(), full = full_2048();
  REQUIRE(vramfit::estimate(qwen, lora, vramfit::Stack::hf_peft, with_budget(24 * GiB)).verdict->fits);
  REQUIRE(vramfit::estimate(qwen, full, vramfit::Stack::hf_peft, with_budget(24 * GiB)).verdict->fits);
  REQUIRE(!vramfit::estimate(qwen, full, vramfit::Stack::hf_peft, with_budget(4 * GiB)).verdict->fits);
  BENCHMARK("fits: Qwen2.5-0.5B LoRA q,k,v,o seq 4096, 24 GiB") {
    return vramfit::estimate(qwen, lora, vramfit::Stack::hf_peft, with_budget(24 * GiB)).verdict->fits;
  };
  BENCHMARK("fits: Qwen2.5-0.5B full seq 2048, 24 GiB") {
    return vramfit::estimate(qwen, full, vramfit::Stack::hf_peft, with_budget(24 * GiB)).verdict->fits;
  };
  BENCHMARK("fits: Qwen2.5-0.5B full seq 2048, 4 GiB (out of memory)") {
    return vramfit::estimate(qwen, full, vramfit::Stack::hf_peft, with_budget(4 * GiB)).verdict->fits;
  };
  const vramfit::Budget b24(vramfit::Bytes(24 * GiB)), b4(vramfit::Bytes(4 * GiB));
  BENCHMARK("fit_verdict: Qwen2.5-0.5B LoRA q,k,v,o seq 4096, 24 GiB") { return vramfit::fit_verdict(qwen, lora, b24).fits; };
  BENCHMARK("fit_verdict: Qwen2.5-0.5B full seq 2048, 24 GiB") { return vramfit::fit_verdict(qwen, full, b24).fits; };
  BENCHMARK("fit_verdict: Qwen2.5-0.5B full seq 2048, 4 GiB (out of memory)") {
    return vramfit::fit_verdict(qwen, full, b4).fits;
  };
  // One thread (RunContext::simulation_threads = 1): the cost to a caller that runs estimates in
  // parallel itself.
  vramfit::RunContext one_thread;
  one_thread.simulation_threads = 1;
  BENCHMARK("fit_verdict, one thread: Qwen2.5-0.5B LoRA q,k,v,o seq 4096, 24 GiB") {
    return vramfit::fit_verdict(qwen, lora, b24, vramfit::Stack::hf_peft, one_thread).fits;
  };
}

TEST_CASE("max_batch and max_seq by simulation (hf-peft 24 layers)", "[simulate]") {
  const vramfit::ModelShape qwen = *vramfit::find_preset("Qwen2.5-0.5B");
  const vramfit::Step lora = lora_4096(), full = full_2048();
  const vramfit::Budget b24(vramfit::Bytes(24 * GiB)), b80(vramfit::Bytes(80 * GiB));
  REQUIRE(vramfit::max_batch(qwen, lora, b24).at.method == vramfit::Method::allocator_simulation);
  BENCHMARK("max_batch: Qwen2.5-0.5B LoRA q,k,v,o seq 4096, 24 GiB") {
    return vramfit::max_batch(qwen, lora, b24).value;
  };
  BENCHMARK("max_batch: Qwen2.5-0.5B LoRA q,k,v,o seq 4096, 80 GiB") {
    return vramfit::max_batch(qwen, lora, b80).value;
  };
  BENCHMARK("max_batch: Qwen2.5-0.5B full seq 2048, 24 GiB") { return vramfit::max_batch(qwen, full, b24).value; };
  BENCHMARK("max_batch: Qwen2.5-0.5B full seq 2048, 80 GiB") { return vramfit::max_batch(qwen, full, b80).value; };
  BENCHMARK("max_seq: Qwen2.5-0.5B LoRA q,k,v,o batch 1, 24 GiB") {
    return vramfit::max_seq(qwen, lora, b24).value;
  };
}
