// ModelShape: derived counts, presets against published parameter totals, validation.
#include <doctest/doctest.h>

#include "support.hpp"

#include <cstdint>
#include <functional>
#include <string>

#include "vramfit/error.hpp"
#include "vramfit/model.hpp"
#include "vramfit/presets.hpp"

using vramfit::test::small;

using vramfit::InvalidInput;
using vramfit::Module;
using vramfit::ModelShape;
using vramfit::ShapeLimits;

namespace {

/// A small made-up GQA shape: h 64, i 160, 3 layers, 4 heads of 16, 2 kv heads, vocab 1000.

/// The field `validate` names for this shape, or "<valid>".
std::string invalid_field(const ModelShape& m) {
  try {
    vramfit::validate(m);
  } catch (const InvalidInput& e) {
    return e.field();
  }
  return "<valid>";
}

ModelShape with(std::function<void(ModelShape&)> change) {
  ModelShape m = small;
  change(m);
  return m;
}

}  // namespace

TEST_CASE("derived widths") {
  CHECK(small.head_dimension() == 16);  // 64 / 4
  CHECK(small.q_width() == 64);         // 4 x 16
  CHECK(small.kv_width() == 32);        // 2 x 16
  const ModelShape explicit_head = with([](ModelShape& m) { m.head_dim = 24; });
  CHECK(explicit_head.head_dimension() == 24);
  CHECK(explicit_head.q_width() == 96);
  CHECK(explicit_head.kv_width() == 48);
  CHECK(explicit_head.dims(Module::o_proj).in == 96);
  CHECK(explicit_head.dims(Module::o_proj).out == 64);
  CHECK(small.dims(Module::k_proj).in == 64);
  CHECK(small.dims(Module::k_proj).out == 32);
  CHECK(small.dims(Module::down_proj).in == 160);
  CHECK(small.dims(Module::down_proj).out == 64);
}

TEST_CASE("parameter counts of a small shape, by hand") {
  // q 64x64 + k 64x32 + v 64x32 + o 64x64 + gate, up, down 64x160 each + two norms of 64.
  const std::uint64_t layer = 4096 + 2048 + 2048 + 4096 + 3 * 10240 + 2 * 64;
  CHECK(small.layer_parameters() == layer);
  CHECK(small.embedding_parameters() == 64000);
  // Layers + embedding + untied lm_head + final norm.
  CHECK(small.parameters() == 3 * layer + 64000 + 64000 + 64);
  CHECK(small.largest_tensor() == 64000);

  const ModelShape tied = with([](ModelShape& m) { m.tied_embeddings = true; });
  CHECK(tied.parameters() == 3 * layer + 64000 + 64);

  // Qwen2-style q/k/v biases: q (64) + k and v (32 each) per layer.
  const ModelShape biased = with([](ModelShape& m) { m.qkv_bias = true; });
  CHECK(biased.layer_parameters() == layer + 64 + 32 + 32);

  // Without a gated MLP there is no gate_proj.
  const ModelShape plain = with([](ModelShape& m) { m.gated_mlp = false; });
  CHECK_FALSE(plain.has(Module::gate_proj));
  CHECK(plain.has(Module::up_proj));
  CHECK(plain.layer_parameters() == layer - 10240);

  // A vocabulary smaller than a projection: the projection is the largest tensor.
  const ModelShape tiny_vocab = with([](ModelShape& m) { m.vocab = 10; });
  CHECK(tiny_vocab.largest_tensor() == 10240);
}

TEST_CASE("presets match the published parameter totals") {
  struct Published {
    const char* name;
    std::uint64_t parameters;
  };
  // Totals as reported for the checkpoints (sum of the safetensors shapes).
  for (const Published p : {Published{"SmolLM2-135M", 134515008ULL}, Published{"Qwen2.5-0.5B", 494032768ULL},
                            Published{"Llama-3.2-1B", 1235814400ULL}, Published{"Llama-3.1-8B", 8030261248ULL},
                            Published{"Mistral-7B-v0.1", 7241732096ULL}}) {
    CAPTURE(p.name);
    const auto shape = vramfit::find_preset(p.name);
    REQUIRE(shape.has_value());
    CHECK(shape->parameters() == p.parameters);
  }
}

TEST_CASE("Qwen3's q/k norms are two head_dim vectors per layer") {
  // Qwen3-0.6B by hand: per layer q 1024x2048, k and v 1024x1024, o 2048x1024, three 1024x3072 MLP
  // matrices, two 1024 norms and the 128-wide q_norm and k_norm; its card says 0.44B outside the
  // (tied) 151936 x 1024 embedding.
  const std::uint64_t layer = 2097152 + 2 * 1048576 + 2097152 + 3 * 3145728 + 2 * 1024 + 2 * 128;
  const ModelShape m = *vramfit::find_preset("Qwen3-0.6B");
  CHECK(m.layer_parameters() == layer);
  CHECK(m.parameters() == 28 * layer + 151936ULL * 1024 + 1024);
  CHECK((28 * layer + 5000000) / 10000000 == 44);  // 0.44B
  ModelShape plain = m;
  plain.qk_norm = false;
  CHECK(m.layer_parameters() - plain.layer_parameters() == 2 * 128);
}

TEST_CASE("every preset is valid and found case-insensitively") {
  for (const auto& p : vramfit::presets) {
    CAPTURE(p.name);
    CHECK(invalid_field(p.shape) == "<valid>");
    std::string lower(p.name);
    for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    REQUIRE(vramfit::find_preset(lower).has_value());
    CHECK(*vramfit::find_preset(lower) == p.shape);
  }
  CHECK_FALSE(vramfit::find_preset("GPT-2").has_value());
  CHECK_FALSE(vramfit::find_preset("SmolLM2").has_value());
}

TEST_CASE("preset() names the flag and lists the known models") {
  CHECK(vramfit::preset("qwen2.5-0.5b").vocab == 151936);
  try {
    (void)vramfit::preset("GPT-2", "--model");
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(e.field() == "--model");
    const std::string what = e.what();
    CHECK(what.find("'GPT-2'") != std::string::npos);
    CHECK(what.find("SmolLM2-135M") != std::string::npos);
    CHECK(what.find("Mistral-7B-v0.1") != std::string::npos);
  }
}

TEST_CASE("validate names each bad field") {
  CHECK(invalid_field(small) == "<valid>");

  CHECK(invalid_field(with([](ModelShape& m) { m.vocab = 0; })) == "vocab");
  CHECK(invalid_field(with([](ModelShape& m) { m.vocab = ShapeLimits::vocab + 1; })) == "vocab");
  CHECK(invalid_field(with([](ModelShape& m) { m.hidden = 0; })) == "hidden");
  CHECK(invalid_field(with([](ModelShape& m) { m.hidden = ShapeLimits::hidden + 4; })) == "hidden");
  CHECK(invalid_field(with([](ModelShape& m) { m.intermediate = 0; })) == "intermediate");
  CHECK(invalid_field(with([](ModelShape& m) { m.intermediate = ShapeLimits::intermediate + 1; })) == "intermediate");
  CHECK(invalid_field(with([](ModelShape& m) { m.layers = 0; })) == "layers");
  CHECK(invalid_field(with([](ModelShape& m) { m.layers = ShapeLimits::layers + 1; })) == "layers");
  CHECK(invalid_field(with([](ModelShape& m) { m.heads = 0; })) == "heads");
  CHECK(invalid_field(with([](ModelShape& m) { m.heads = ShapeLimits::heads + 4; })) == "heads");
  CHECK(invalid_field(with([](ModelShape& m) { m.kv_heads = 0; })) == "kv_heads");
  CHECK(invalid_field(with([](ModelShape& m) { m.kv_heads = 8; })) == "kv_heads");  // more than heads
  CHECK(invalid_field(with([](ModelShape& m) { m.kv_heads = 3; })) == "kv_heads");  // does not divide 4
  // hidden 66 is not a multiple of 4 heads: head_dim must be given...
  CHECK(invalid_field(with([](ModelShape& m) { m.hidden = 66; })) == "head_dim");
  // ...and then it is fine.
  CHECK(invalid_field(with([](ModelShape& m) {
          m.hidden = 66;
          m.head_dim = 16;
        })) == "<valid>");
  CHECK(invalid_field(with([](ModelShape& m) { m.head_dim = ShapeLimits::head_dim + 1; })) == "head_dim");
  // hidden / heads beyond the head_dim bound too.
  CHECK(invalid_field(with([](ModelShape& m) {
          m.hidden = 8192;
          m.heads = 4;
        })) == "head_dim");

  // Limits themselves are allowed.
  CHECK(invalid_field(with([](ModelShape& m) { m.vocab = ShapeLimits::vocab; })) == "<valid>");
  CHECK(invalid_field(with([](ModelShape& m) { m.layers = ShapeLimits::layers; })) == "<valid>");
  CHECK(invalid_field(with([](ModelShape& m) { m.kv_heads = 4; })) == "<valid>");
  CHECK(invalid_field(with([](ModelShape& m) { m.kv_heads = 1; })) == "<valid>");
  CHECK(invalid_field(vramfit::detail::largest_shape) == "<valid>");
}

// num_hidden_layers up to 100000 was accepted, and the simulation's time grows about as
// layers^1.5: every dimension is bounded by what real models have (ShapeLimits).
TEST_CASE("dimensions beyond real models are refused, with the bound and why") {
  CHECK(invalid_field(with([](ModelShape& m) { m.layers = 100000; })) == "layers");
  CHECK(invalid_field(with([](ModelShape& m) { m.layers = 1600; })) == "layers");
  CHECK(invalid_field(with([](ModelShape& m) { m.layers = 257; })) == "layers");
  // The presets, the largest published shapes among them, are well inside.
  for (const auto& p : vramfit::presets) CHECK(invalid_field(p.shape) == "<valid>");
}

TEST_CASE("validate error messages give the range, the value and why the bound") {
  try {
    vramfit::validate(with([](ModelShape& m) { m.layers = 0; }));
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(std::string(e.what()) ==
          "layers: must be between 1 and 256, got 0 (vramfit's bound, well above every published model)");
  }
  try {
    vramfit::validate(with([](ModelShape& m) { m.kv_heads = 3; }));
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(std::string(e.what()) == "kv_heads: must divide heads (4), got 3");
  }
}

TEST_CASE("a shape whose parameter count would leave 64 bits is refused by the bounds") {
  // 100000 layers of 2^24-wide projections: ~2^66 parameters; ShapeLimits refuse it first (and
  // keep every accepted shape's count far inside 64 bits: a static_assert in model.hpp).
  const ModelShape huge{.vocab = 1, .hidden = 1ULL << 24, .intermediate = 1ULL << 24, .layers = 100000,
                        .heads = 256, .kv_heads = 1};
  CHECK(invalid_field(huge) == "hidden");
}
