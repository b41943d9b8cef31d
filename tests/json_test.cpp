// The one JSON schema (json.hpp): round trips, the array form of the LoRA targets, and bad input
// named by its key.
#include <doctest/doctest.h>

#ifdef VRAMFIT_HAS_JSON
#include <string>

#include <nlohmann/json.hpp>

#include "support.hpp"
#include "vramfit/json.hpp"

using namespace vramfit;
using test::field_of;

namespace {
nlohmann::json step_json(const std::string& extra = "") {
  return nlohmann::json::parse(R"({"batch": 2, "seq": 128, "mode": "lora", "lora_rank": 8,
                                   "lora_targets": ["q_proj", "v_proj"])" + extra + "}");
}
}  // namespace

TEST_CASE("a shape comes back from its JSON") {
  const ModelShape qwen{.vocab = 151936, .hidden = 896, .intermediate = 4864, .layers = 24, .heads = 14, .kv_heads = 2,
                        .head_dim = 64, .tied_embeddings = true, .qkv_bias = true};
  CHECK(nlohmann::json(qwen).get<ModelShape>() == qwen);
  ModelShape plain = test::small;
  plain.gated_mlp = false;
  const nlohmann::json j = plain;
  CHECK(j["head_dim"] == 16);  // written as the width, read back as given
  const ModelShape back = j.get<ModelShape>();
  CHECK(back.head_dimension() == plain.head_dimension());
  CHECK_FALSE(back.gated_mlp);
  CHECK(back.vocab == plain.vocab);
  CHECK(back.kv_heads == plain.kv_heads);
}

TEST_CASE("a step comes back from its JSON: LoRA targets, hybrid sharding, peak_over") {
  Step lora = test::lora_qv;
  lora.lora.targets = TargetSet{Module::v_proj, Module::q_proj, Module::down_proj};
  lora.precision = Precision::fp16;
  lora.attention = Attention::mem_efficient;
  lora.gradient_checkpointing = true;
  lora.logits_retained = true;
  lora.peak_over = PeakOver::first_step;
  lora.lora.dropout = 0.05;
  lora.optimizer = Optimizer::sgd_momentum;
  const nlohmann::json j = lora;
  CHECK(j["lora_dropout"] == 0.05);
  CHECK(j["optim"] == "sgd-momentum");
  CHECK(j["lora_targets"] == nlohmann::json({"q_proj", "v_proj", "down_proj"}));  // all_modules' order
  CHECK(j["peak_over"] == "first");
  CHECK(j.get<Step>() == lora);

  Step all = lora;
  all.lora.targets = TargetSet::all_linear();
  CHECK(nlohmann::json(all)["lora_targets"].size() == 7);
  CHECK(nlohmann::json(all).get<Step>() == all);

  const Step hybrid{.batch = 4, .seq = 4096, .mode = Mode::full, .world_size = 8, .sharding = Sharding::hybrid,
                    .shard_group = 4};
  const nlohmann::json h = hybrid;
  CHECK(h["sharding"] == "hybrid:4");
  CHECK_FALSE(h.contains("lora_targets"));  // full fine-tuning has no adapters
  CHECK(h.get<Step>() == hybrid);
  for (const Sharding s : {Sharding::none, Sharding::zero1, Sharding::zero2, Sharding::full}) {
    const Step st{.mode = Mode::full, .world_size = 2, .sharding = s};
    CHECK(nlohmann::json(st).get<Step>() == st);
  }

  // The Trainer's settings: accumulation and fp32 weights under autocast; unmixed weights read back unset.
  Step trainer = lora;
  trainer.grad_accum = 4;
  trainer.weights = Precision::fp32;
  trainer.optimizer = Optimizer::adamw_fused;
  const nlohmann::json t = trainer;
  CHECK((t["grad_accum"] == 4 && t["weights"] == "fp32" && t["optim"] == "adamw-fused"));
  CHECK(t.get<Step>() == trainer);
  CHECK(j["weights"] == "fp16");  // the precision's
  CHECK_FALSE(j.get<Step>().weights.has_value());

  // ordered_json keeps the schema's order.
  const nlohmann::ordered_json ordered = lora;
  CHECK(ordered.begin().key() == "batch");
  CHECK(nlohmann::json::parse(ordered.dump()).get<Step>() == lora);
}

TEST_CASE("absent and null optional keys take Step{}'s values") {
  Step want;
  want.batch = 2;
  want.seq = 128;
  CHECK(nlohmann::json::parse(R"({"batch": 2, "seq": 128, "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"]})")
            .get<Step>() == want);
  CHECK(step_json(R"(, "attention": null, "precision": null, "sharding": null, "gradient_checkpointing": null)")
            .get<Step>() == want);
  const nlohmann::json full = nlohmann::json::parse(R"({"batch": 2, "seq": 128, "mode": "full", "lora_rank": null,
                                                        "lora_targets": null})");
  CHECK(full.get<Step>().mode == Mode::full);
  // Measurement rows from before "optim" and "lora_dropout": AdamW, no dropout (the harness's own
  // "optimizer" object is not read).
  const Step old = step_json(R"(, "optimizer": {"lr": 0.0001}, "lora_dropout": 0.0)").get<Step>();
  CHECK(old.optimizer == Optimizer::adamw);
  CHECK_FALSE(old.lora_dropout());
}

TEST_CASE("phase bytes come back from their JSON") {
  PhaseBytes p;
  std::uint64_t n = 1;
  for (Phase ph : all_phases) p[ph] = Bytes(n *= 1000);
  const nlohmann::json j = p;
  CHECK(j.size() == phase_count);
  CHECK(j.get<PhaseBytes>() == p);
  CHECK(field_of([&] { (void)nlohmann::json({{"forward", 1}}).get<PhaseBytes>(); }) != "<no error>");
}

TEST_CASE("an estimate is written with both methods") {
  const Estimate e = estimate(test::small, test::lora_qv);
  const nlohmann::ordered_json j = e;
  CHECK(j["peak_bytes"] == e.peak.count());
  CHECK(j["required_bytes"] == e.required.count());
  CHECK(j["closed_form"]["peak_bytes"] == e.closed_form.peak.count());
  CHECK(j["closed_form"]["terms"].size() == e.closed_form.term_count);
  CHECK(j["simulation"]["available"] == e.simulation.has_value());
  CHECK(j["simulation"].contains("why") == !e.simulation.has_value());
}

TEST_CASE("bad input is named by its key") {
  const auto step_error = [](const nlohmann::json& j) { return field_of([&] { (void)j.get<Step>(); }); };
  nlohmann::json j = step_json();
  j.erase("batch");
  CHECK(step_error(j) == "batch");
  CHECK(step_error(step_json(R"(, "seq": -128)")) == "seq");
  CHECK(step_error(step_json(R"(, "world_size": 1.5)")) == "world_size");
  CHECK(step_error(step_json(R"(, "lora_rank": -1)")) == "lora_rank");
  j = step_json();
  j["lora_targets"] = "q_proj,v_proj";  // the harnesses' old string form
  CHECK(step_error(j) == "lora_targets");
  j["lora_targets"] = nlohmann::json::array({"q_proj", 3});
  CHECK(step_error(j) == "lora_targets");
  j["lora_targets"] = nlohmann::json::array({"q_proj", "x_proj"});
  CHECK(step_error(j) == "lora_targets");
  j.erase("lora_targets");
  CHECK(step_error(j) == "lora_targets");
  CHECK(step_error(step_json(R"(, "mode": "qlora")")) == "mode");
  CHECK(step_error(step_json(R"(, "mode": 1)")) == "mode");
  CHECK(step_error(step_json(R"(, "sharding": "hybrid")")) == "sharding");
  CHECK(step_error(step_json(R"(, "peak_over": "second")")) == "peak_over");
  CHECK(step_error(step_json(R"(, "gradient_checkpointing": "yes")")) == "gradient_checkpointing");
  CHECK(step_error(step_json(R"(, "optim": "adam")")) == "optim");
  CHECK(step_error(step_json(R"(, "lora_dropout": 1.0)")) == "lora_dropout");
  CHECK(step_error(step_json(R"(, "lora_dropout": "0.1")")) == "lora_dropout");
  CHECK(step_error(nlohmann::json::array()) == "step");

  const auto shape_error = [](const nlohmann::json& s) { return field_of([&] { (void)s.get<ModelShape>(); }); };
  nlohmann::json shape = test::small;
  shape["vocab"] = -5;
  CHECK(shape_error(shape) == "vocab");
  shape = test::small;
  shape.erase("layers");
  CHECK(shape_error(shape) == "layers");
  shape = test::small;
  shape["kv_heads"] = 3;  // does not divide 4 heads
  CHECK(shape_error(shape) == "kv_heads");
  shape = test::small;
  shape["tied_embeddings"] = 1;
  CHECK(shape_error(shape) == "tied_embeddings");
  CHECK(shape_error(nlohmann::json("SmolLM2-135M")) == "shape");
}
#endif
