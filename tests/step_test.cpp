// Step: the words users type (parse_*), LoRA targets, and validation of a step against a model.
#include <doctest/doctest.h>

#include "support.hpp"

#include <functional>
#include <string>
#include <utility>

#include "vramfit/error.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/step.hpp"

using namespace vramfit;
using vramfit::test::field_of;
using vramfit::test::small;
using vramfit::test::lora_qv;

namespace {



std::string invalid_field(const Step& s, const ModelShape& m = small) {
  return field_of([&] { validate(s, m); });
}

}  // namespace

TEST_CASE("parse_precision") {
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(parse_precision("BF16") == Precision::bf16);
  CHECK(parse_precision("fp16") == Precision::fp16);
  CHECK(parse_precision("Fp32") == Precision::fp32);
  CHECK(field_of([] { (void)parse_precision("bf32"); }) == "--precision");
  CHECK(field_of([] { (void)parse_precision(""); }) == "--precision");
  CHECK(field_of([] { (void)parse_precision("float32", "precision"); }) == "precision");
  CHECK(element_bytes(Precision::bf16) == 2);
  CHECK(element_bytes(Precision::fp16) == 2);
  CHECK(element_bytes(Precision::fp32) == 4);
}

TEST_CASE("parse_mode, parse_attention, parse_peak_over") {
  CHECK(parse_mode("lora") == Mode::lora);
  CHECK(parse_mode("FULL") == Mode::full);
  CHECK(field_of([] { (void)parse_mode("qlora"); }) == "--mode");

  CHECK(parse_attention("flash") == Attention::flash);
  CHECK(parse_attention("math") == Attention::math);
  CHECK(parse_attention("mem-efficient") == Attention::mem_efficient);
  CHECK(parse_attention("mem_efficient") == Attention::mem_efficient);
  CHECK(parse_attention("Efficient") == Attention::mem_efficient);
  CHECK(field_of([] { (void)parse_attention("sdpa"); }) == "--attention");

  CHECK(parse_peak_over("first") == PeakOver::first_step);
  CHECK(parse_peak_over("STEADY") == PeakOver::steady);
  CHECK(field_of([] { (void)parse_peak_over("second"); }) == "--phase");

  // Names round-trip through to_string.
  for (auto p : {Precision::bf16, Precision::fp16, Precision::fp32}) CHECK(parse_precision(to_string(p)) == p);
  for (auto a : {Attention::flash, Attention::mem_efficient, Attention::math}) CHECK(parse_attention(to_string(a)) == a);
  for (auto p : {PeakOver::first_step, PeakOver::steady}) CHECK(parse_peak_over(to_string(p)) == p);
}

TEST_CASE("parse_module and parse_targets") {
  CHECK(parse_module("q_proj") == Module::q_proj);
  CHECK(parse_module("DOWN_PROJ") == Module::down_proj);
  CHECK(field_of([] { (void)parse_module("qkv_proj"); }) == "--lora-targets");

  CHECK(parse_targets("q_proj,v_proj") == TargetSet::peft_default());
  CHECK(parse_targets(" v_proj , q_proj ") == TargetSet::peft_default());
  CHECK(parse_targets("all-linear") == TargetSet::all_linear());
  CHECK(parse_targets("ALL_LINEAR") == TargetSet::all_linear());
  CHECK(parse_targets("attention") == TargetSet::attention());
  CHECK(parse_targets("q_proj,k_proj,v_proj,o_proj") == TargetSet::attention());
  CHECK(parse_targets("down_proj") == TargetSet{Module::down_proj});
  CHECK(parse_targets("q_proj,q_proj") == TargetSet{Module::q_proj});

  const TargetSet mlp = parse_targets("gate_proj,up_proj,down_proj");
  CHECK(mlp.has(Module::gate_proj));
  CHECK(mlp.has(Module::up_proj));
  CHECK(mlp.has(Module::down_proj));
  CHECK_FALSE(mlp.has(Module::q_proj));
  CHECK_FALSE(mlp.has(Module::o_proj));
}

TEST_CASE("parse_targets refuses bad lists, naming the field") {
  for (const char* bad : {"", " ", "q_proj,", ",v_proj", "q_proj,,v_proj", "q_proj,foo", "qproj", "all",
                          "q_proj v_proj", "lm_head"}) {
    CAPTURE(bad);
    CHECK(field_of([&] { (void)parse_targets(bad); }) == "--lora-targets");
  }
  CHECK(field_of([] { (void)parse_targets("foo", "targets"); }) == "targets");
  try {
    (void)parse_targets("q_proj,foo");
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(std::string(e.what()).find("unknown module 'foo'") != std::string::npos);
  }
}

TEST_CASE("parse_targets errors quote the whole list the user typed") {
  // Core bug (step.hpp, parse_targets): the message quotes what is left of the list after the
  // modules already read ("in ''" for "q_proj,"), not the list itself.
  const auto message = [](const char* text) -> std::string {
    try {
      (void)parse_targets(text);
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "<no error>";
  };
  CHECK(message("q_proj,") == "--lora-targets: empty module name in 'q_proj,'");
  CHECK(message("q_proj,,v_proj") == "--lora-targets: empty module name in 'q_proj,,v_proj'");
  CHECK(message(",v_proj") == "--lora-targets: empty module name in ',v_proj'");
}

TEST_CASE("targets print in module order") {
  CHECK(to_string(parse_targets("v_proj,q_proj")) == "q_proj,v_proj");
  CHECK(to_string(TargetSet::attention()) == "q_proj,k_proj,v_proj,o_proj");
  CHECK(to_string(TargetSet::all_linear()) == "all-linear");
  CHECK(to_string(TargetSet{Module::up_proj, Module::down_proj}) == "up_proj,down_proj");
  CHECK(TargetSet{}.empty());
  CHECK_FALSE(TargetSet::peft_default().empty());
}

TEST_CASE("tokens and adapted modules") {
  const Step s{.batch = 3, .seq = 512};
  CHECK(s.tokens() == 1536);
  CHECK(s.adapted(Module::q_proj));
  CHECK(s.adapted(Module::v_proj));
  CHECK_FALSE(s.adapted(Module::k_proj));
  const Step full{.mode = Mode::full};
  CHECK_FALSE(full.adapted(Module::q_proj));  // full fine-tuning has no adapters
}

TEST_CASE("validate(step) names each bad field") {
  CHECK(invalid_field(Step{}) == "<no error>");
  CHECK(invalid_field(Step{.batch = 0}) == "batch");
  CHECK(invalid_field(Step{.batch = (1ULL << 20) + 1}) == "batch");
  CHECK(invalid_field(Step{.batch = 1ULL << 20}) == "<no error>");
  CHECK(invalid_field(Step{.seq = 0}) == "seq");
  CHECK(invalid_field(Step{.seq = (1ULL << 24) + 1}) == "seq");
  CHECK(invalid_field(Step{.seq = 1ULL << 24}) == "<no error>");
  CHECK(invalid_field(Step{.lora = {.rank = 0}}) == "lora rank");
  CHECK(invalid_field(Step{.lora = {.rank = 65537}}) == "lora rank");
  // `small` on q_proj, v_proj: v_proj is 64 -> 32 (2 kv heads x 16).
  CHECK(invalid_field(Step{.lora = {.rank = 32}}) == "<no error>");
  CHECK(invalid_field(Step{.lora = {.rank = 33}}) == "lora rank");
  CHECK(invalid_field(Step{.lora = {.rank = 8, .targets = TargetSet{}}}) == "lora targets");
  // Full fine-tuning has no adapters: rank and targets are not looked at.
  CHECK(invalid_field(Step{.mode = Mode::full, .lora = {.rank = 0, .targets = TargetSet{}}}) == "<no error>");

  // gate_proj only exists in a gated MLP.
  ModelShape plain = small;
  plain.gated_mlp = false;
  const Step on_gate{.lora = {.rank = 8, .targets = TargetSet::all_linear()}};
  CHECK(invalid_field(on_gate, small) == "<no error>");
  CHECK(invalid_field(on_gate, plain) == "lora targets");
  CHECK(invalid_field(Step{.lora = {.rank = 8, .targets = {Module::up_proj, Module::down_proj}}}, plain) ==
        "<no error>");
}

TEST_CASE("validate(step): gradient accumulation and mixed precision") {
  CHECK(invalid_field(Step{.grad_accum = 0}) == "grad accum");
  CHECK(invalid_field(Step{.grad_accum = 65537}) == "grad accum");
  CHECK(invalid_field(Step{.grad_accum = 65536}) == "<no error>");
  // Mixed precision is fp32 weights under bf16 or fp16 autocast; the weights' own dtype is not mixed.
  CHECK(invalid_field(Step{.weights = Precision::fp32}) == "<no error>");
  CHECK(invalid_field(Step{.precision = Precision::fp16, .weights = Precision::fp32}) == "<no error>");
  CHECK(invalid_field(Step{.weights = Precision::bf16}) == "<no error>");
  CHECK(invalid_field(Step{.precision = Precision::fp32, .weights = Precision::bf16}) == "weights");
  CHECK(invalid_field(Step{.weights = Precision::fp16}) == "weights");
  CHECK(Step{.weights = Precision::fp32}.mixed_precision());
  CHECK_FALSE(Step{.weights = Precision::bf16}.mixed_precision());
  CHECK(Step{}.weight_precision() == Precision::bf16);
}

TEST_CASE("operator== sees every field; unset weights are the precision's") {
  const Step base = lora_qv;
  const auto differs = [&](auto change) {
    Step s = base;
    change(s);
    return !(s == base);
  };
  CHECK(differs([](Step& s) { s.batch = 3; }));
  CHECK(differs([](Step& s) { s.seq = 7; }));
  CHECK(differs([](Step& s) { s.precision = Precision::fp16; }));
  CHECK(differs([](Step& s) { s.mode = Mode::full; }));
  CHECK(differs([](Step& s) { s.lora.rank = 2; }));
  CHECK(differs([](Step& s) { s.lora.dropout = 0.1; }));
  CHECK(differs([](Step& s) { s.gradient_checkpointing = true; }));
  CHECK(differs([](Step& s) { s.attention = Attention::math; }));
  CHECK(differs([](Step& s) { s.logits_retained = true; }));
  CHECK(differs([](Step& s) { s.optimizer = Optimizer::sgd; }));
  CHECK(differs([](Step& s) { s.grad_accum = 2; }));
  CHECK(differs([](Step& s) { s.weights = Precision::fp32; }));
  CHECK(differs([](Step& s) { s.peak_over = PeakOver::first_step; }));
  CHECK(differs([](Step& s) { s.world_size = 2; }));
  CHECK(differs([](Step& s) { s.sharding = Sharding::zero1; }));
  CHECK(differs([](Step& s) { s.shard_group = 2; }));
  CHECK_FALSE(differs([](Step& s) { s.weights = s.precision; }));
  static_assert(sizeof(Step) == 96, "a Step field added or removed: update operator== and this test");
}

TEST_CASE("parse_optimizer reads vramfit's names and the Trainer's") {
  CHECK(parse_optimizer("adamw") == Optimizer::adamw);
  CHECK(parse_optimizer("adamw_torch") == Optimizer::adamw);
  CHECK(parse_optimizer("adamw-fused") == Optimizer::adamw_fused);
  CHECK(parse_optimizer("adamw_torch_fused") == Optimizer::adamw_fused);
  CHECK(parse_optimizer("Adafactor") == Optimizer::adafactor);
  CHECK(parse_optimizer("sgd") == Optimizer::sgd);
  CHECK(parse_optimizer("sgd_momentum") == Optimizer::sgd_momentum);
  CHECK_THROWS_WITH_AS(parse_optimizer("adamw_bnb_8bit"),
                       "--optim: unknown optimizer 'adamw_bnb_8bit' (allowed: adamw, adamw-fused, adafactor, "
                       "sgd-momentum, sgd)",
                       InvalidInput);
}

// `--lora-rank 65536` on a hidden size of 896 was accepted and simulated: the rank is bounded by the
// smallest min(in, out) of the projections it targets, and the error names that projection.
TEST_CASE("the LoRA rank is at most the smallest min(in, out) of the targeted projections") {
  // small: q_proj 64 -> 64, k_proj and v_proj 64 -> 32, o_proj 64 -> 64, gate/up 64 -> 160, down 160 -> 64.
  CHECK(max_lora_rank(small, TargetSet::peft_default()) == std::pair<std::uint64_t, Module>{32, Module::v_proj});
  CHECK(max_lora_rank(small, TargetSet{Module::q_proj, Module::o_proj}).first == 64);
  CHECK(max_lora_rank(small, TargetSet{Module::up_proj}) == std::pair<std::uint64_t, Module>{64, Module::up_proj});
  CHECK(max_lora_rank(small, TargetSet::all_linear()) == std::pair<std::uint64_t, Module>{32, Module::k_proj});
  CHECK(invalid_field(Step{.lora = {.rank = 64, .targets = {Module::q_proj, Module::o_proj}}}) == "<no error>");
  CHECK(invalid_field(Step{.lora = {.rank = 65, .targets = {Module::q_proj, Module::o_proj}}}) == "lora rank");

  // Qwen2.5-0.5B's shape: hidden 896, k/v 896 -> 128.
  const ModelShape qwen{.vocab = 151936, .hidden = 896, .intermediate = 4864, .layers = 24, .heads = 14,
                        .kv_heads = 2, .head_dim = 64, .tied_embeddings = true, .qkv_bias = true};
  const Step huge{.lora = {.rank = 65536, .targets = TargetSet::all_linear()}};
  CHECK(invalid_field(huge, qwen) == "lora rank");
  try {
    validate(huge, qwen);
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(std::string(e.what()) ==
          "lora rank: must be between 1 and 128, got 65536 (the smallest min(in, out) of the targeted projections, "
          "k_proj 896 -> 128; a larger rank is not a low-rank adapter)");
  }
  CHECK(invalid_field(Step{.lora = {.rank = 128, .targets = TargetSet::all_linear()}}, qwen) == "<no error>");
  // Full fine-tuning has no adapters: the rank is not looked at.
  CHECK(invalid_field(Step{.mode = Mode::full, .lora = {.rank = 65536}}, qwen) == "<no error>");
}

namespace {
// Every value of `E` has a name, the names differ, and each parses back (case-insensitively) to its value.
template <class E>
void check_name_table(std::size_t values) {
  const auto& names = vramfit::detail::EnumNames<E>::names;
  CHECK(names.size() == values);
  for (const auto& [value, name] : names) {
    CAPTURE(std::string(name));
    CHECK(vramfit::detail::enum_name(value) == name);
    CHECK(vramfit::detail::parse_enum<E>(name, "field") == value);
    std::string upper(name);
    for (char& c : upper) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    CHECK(vramfit::detail::parse_enum<E>(upper, "field") == value);
    for (const auto& [other, other_name] : names) CHECK((other == value) == (other_name == name));
  }
  CHECK(test::field_of([] { (void)vramfit::detail::parse_enum<E>("no such name", "the field"); }) == "the field");
}
}  // namespace

TEST_CASE("every enum's one name table drives to_string and parsing") {
  check_name_table<Precision>(3);
  check_name_table<Mode>(2);
  check_name_table<Attention>(3);
  check_name_table<PeakOver>(2);
  check_name_table<Sharding>(5);
  check_name_table<Module>(7);
  check_name_table<Phase>(phase_count);
  CHECK(to_key(Phase::loss_backward) == "loss_backward");
  CHECK(parse_phase("optimizer_step") == Phase::optimizer_step);
}
