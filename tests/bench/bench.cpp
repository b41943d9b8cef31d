// Catch2 benchmarks of the hot paths: one prediction, a largest-batch search, reading a config.json.
// Targets: predict under 100 ns, max_batch under 2 us. Build in Release. (`vramfit::estimate`, the
// exact path, is in bench_simulate.cpp.)
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "vramfit/predictor.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/step.hpp"
#if VRAMFIT_HAS_JSON
#include "vramfit/config_json.hpp"
#endif

namespace {
// Read through volatiles inside each timed call, so the optimiser can neither fold the constexpr
// prediction at compile time nor hoist it out of the benchmark's loop.
volatile std::uint64_t batch_source = 1;
volatile std::uint64_t seq_source = 4096;
volatile std::uint64_t budget_source = 24000000000ULL;  // 24 GB
}  // namespace

TEST_CASE("predict and max_batch") {
  const vramfit::HfPeftPredictor predictor;
  const vramfit::ModelShape qwen = vramfit::preset("Qwen2.5-0.5B");
  // LoRA (PEFT defaults: rank 8 on q_proj, v_proj), bf16, flash attention, seq 4096.
  const vramfit::Step lora{.batch = 1, .seq = 4096};

  const auto p = predictor.predict(qwen, lora);
  REQUIRE(p.phase == vramfit::Phase::loss_backward);
  const auto batch = predictor.max_batch(qwen, lora, vramfit::Budget(vramfit::Bytes(24000000000ULL)));
  REQUIRE(batch >= 1);

  BENCHMARK("predict: HfPeftPredictor, Qwen2.5-0.5B LoRA seq 4096") {
    vramfit::Step s = lora;
    s.batch = batch_source;
    s.seq = seq_source;
    return predictor.predict(qwen, s).peak.count();
  };

  BENCHMARK("max_batch: HfPeftPredictor, Qwen2.5-0.5B LoRA seq 4096, 24 GB") {
    vramfit::Step s = lora;
    s.seq = seq_source;
    return predictor.max_batch(qwen, s, vramfit::Budget(vramfit::Bytes(budget_source)));
  };

  // A large budget and short rows: many batches per allocator margin, the hard case for max_batch.
  const vramfit::ModelShape smol = vramfit::preset("SmolLM2-135M");
  BENCHMARK("max_batch: HfPeftPredictor, SmolLM2-135M LoRA seq 16, 80 GB") {
    vramfit::Step s{.batch = 1, .seq = seq_source / 256};
    return predictor.max_batch(smol, s, vramfit::Budget(vramfit::Bytes(budget_source / 3 * 10)));
  };

  BENCHMARK("max_seq: HfPeftPredictor, Qwen2.5-0.5B LoRA batch 1, 24 GB") {
    vramfit::Step s = lora;
    s.batch = batch_source;
    return predictor.max_seq(qwen, s, vramfit::Budget(vramfit::Bytes(budget_source)));
  };
}

#if VRAMFIT_HAS_JSON
TEST_CASE("load_hf_config") {
  const std::string path = std::string(VRAMFIT_TEST_DATA_DIR) + "/configs/Qwen2.5-0.5B.json";
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(vramfit::parse_hf_config(text).shape.vocab == 151936);

  BENCHMARK("parse_hf_config: Qwen2.5-0.5B text") { return vramfit::parse_hf_config(text).shape.parameters(); };
  BENCHMARK("load_hf_config: Qwen2.5-0.5B file") { return vramfit::load_hf_config(path).shape.parameters(); };
}
#endif
