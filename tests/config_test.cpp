// config_json.hpp: Hugging Face config.json files into model shapes; every error names its field.
#include <doctest/doctest.h>

#include "support.hpp"

#if VRAMFIT_HAS_JSON

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "vramfit/config_json.hpp"
#include "vramfit/presets.hpp"

using vramfit::InvalidInput;
using vramfit::ModelShape;
using vramfit::load_hf_config;
using vramfit::parse_hf_config;

namespace {

const std::filesystem::path configs = std::filesystem::path(VRAMFIT_TEST_DATA_DIR) / "configs";

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The error a config text raises: field and full message; field "<parsed>" when none.
struct Failure {
  std::string field;
  std::string message;
};
Failure failure_of(const std::string& text) {
  try {
    (void)parse_hf_config(text);
  } catch (const InvalidInput& e) {
    return {e.field(), e.what()};
  }
  return {"<parsed>", ""};
}
Failure failure_of_file(const std::filesystem::path& p) {
  try {
    (void)load_hf_config(p);
  } catch (const InvalidInput& e) {
    return {e.field(), e.what()};
  }
  return {"<parsed>", ""};
}
bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// A minimal Llama config; `extra` is spliced in as more members (a later duplicate key wins).
std::string llama(const std::string& extra = "") {
  return R"({"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 160,
             "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2)" +
         (extra.empty() ? std::string() : ", " + extra) + "}";
}

}  // namespace

TEST_CASE("the public configs give the presets' shapes") {
  for (const char* name : {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B", "Mistral-7B-v0.1", "Qwen3-0.6B"}) {
    CAPTURE(name);
    const ModelShape loaded = load_hf_config(configs / (std::string(name) + ".json"));
    ModelShape expected = vramfit::preset(name);
    // Presets spell head_dim out; SmolLM2's and Qwen2.5's config.json leave it to hidden / heads.
    CHECK(loaded.head_dimension() == expected.head_dimension());
    expected.head_dim = loaded.head_dim;
    CHECK(loaded == expected);
  }
}

TEST_CASE("fields of the public configs, by hand") {
  const ModelShape qwen = load_hf_config(configs / "Qwen2.5-0.5B.json");
  CHECK(qwen.vocab == 151936);
  CHECK(qwen.hidden == 896);
  CHECK(qwen.kv_heads == 2);
  CHECK(qwen.head_dim == 0);  // absent: hidden / heads = 64
  CHECK(qwen.head_dimension() == 64);
  CHECK(qwen.qkv_bias);  // Qwen2 always has q/k/v biases
  CHECK(qwen.tied_embeddings);
  CHECK(qwen.gated_mlp);
  CHECK(qwen.parameters() == 494032768ULL);

  const ModelShape mistral = load_hf_config(configs / "Mistral-7B-v0.1.json");
  CHECK_FALSE(mistral.qkv_bias);
  CHECK_FALSE(mistral.tied_embeddings);
  CHECK(mistral.parameters() == 7241732096ULL);

  const ModelShape llama32 = load_hf_config(configs / "Llama-3.2-1B.json");
  CHECK(llama32.head_dim == 64);
  CHECK(llama32.parameters() == 1235814400ULL);
}

TEST_CASE("defaults for absent fields") {
  const ModelShape m = parse_hf_config(llama());
  CHECK_FALSE(m.tied_embeddings);  // LlamaConfig: tie_word_embeddings=False
  CHECK_FALSE(m.qkv_bias);         // attention_bias=False
  CHECK(m.gated_mlp);
  CHECK(m.head_dim == 0);

  // num_key_value_heads absent or null: as many as the query heads.
  const std::string no_kv = R"({"model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
      "intermediate_size": 160, "num_hidden_layers": 3, "num_attention_heads": 4})";
  CHECK(parse_hf_config(no_kv).shape.kv_heads == 4);
  CHECK(parse_hf_config(llama(R"("num_key_value_heads": null)")).shape.kv_heads == 4);
  // head_dim null: hidden / heads.
  CHECK(parse_hf_config(llama(R"("head_dim": null)")).shape.head_dimension() == 16);
  CHECK(parse_hf_config(llama(R"("head_dim": 32)")).shape.head_dimension() == 32);
  CHECK(parse_hf_config(llama(R"("tie_word_embeddings": true)")).shape.tied_embeddings);
}

TEST_CASE("q/k/v biases by model type") {
  const auto with_type = [](const char* type, const std::string& extra = "") {
    return llama(std::string(R"("model_type": ")") + type + "\"" + (extra.empty() ? "" : ", " + extra));
  };
  CHECK(parse_hf_config(with_type("qwen2")).shape.qkv_bias);
  CHECK_FALSE(parse_hf_config(with_type("llama")).shape.qkv_bias);
  CHECK(parse_hf_config(with_type("llama", R"("attention_bias": true)")).shape.qkv_bias);
  CHECK_FALSE(parse_hf_config(with_type("llama", R"("attention_bias": false)")).shape.qkv_bias);
  // Mistral has no attention_bias option: the field is ignored.
  CHECK_FALSE(parse_hf_config(with_type("mistral", R"("attention_bias": true)")).shape.qkv_bias);
  // Qwen2's biases are not optional.
  CHECK(parse_hf_config(with_type("qwen2", R"("attention_bias": false)")).shape.qkv_bias);
}

TEST_CASE("Qwen3: q/k norms, head_dim 128 when absent, optional biases") {
  const auto qwen3 = [](const std::string& extra = "") {
    return llama(std::string(R"("model_type": "qwen3")") + (extra.empty() ? "" : ", " + extra));
  };
  const ModelShape m = parse_hf_config(qwen3()).shape;
  CHECK(m.qk_norm);
  CHECK_FALSE(m.qkv_bias);
  CHECK(m.head_dim == 128);  // Qwen3Config's default, not hidden / heads (16 here)
  CHECK(parse_hf_config(qwen3(R"("head_dim": 32)")).shape.head_dimension() == 32);
  CHECK(parse_hf_config(qwen3(R"("attention_bias": true)")).shape.qkv_bias);
  CHECK_FALSE(parse_hf_config(llama()).shape.qk_norm);
  // A sliding window only with use_sliding_window, as Qwen2's.
  CHECK_FALSE(parse_hf_config(qwen3(R"("sliding_window": 4096)")).sliding_window.has_value());
  CHECK(parse_hf_config(qwen3(R"("use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 1)"))
            .sliding_window == 4096u);
}

TEST_CASE("the MLP is gated whatever hidden_act names") {
  CHECK(parse_hf_config(llama(R"("hidden_act": "silu")")).shape.gated_mlp);
  CHECK(parse_hf_config(llama(R"("hidden_act": "swish")")).shape.gated_mlp);
  CHECK(parse_hf_config(llama(R"("hidden_act": "gelu")")).shape.gated_mlp);
  const Failure f = failure_of(llama(R"("hidden_act": 3)"));
  CHECK(f.field == "config.json: hidden_act");
}

// A config with no model_type was taken as llama (through architectures): the type decides the
// biases and the window, so it is required, as transformers always writes it.
TEST_CASE("model_type is required; unsupported ones are named") {
  const std::string body = R"("vocab_size": 1000, "hidden_size": 64, "intermediate_size": 160,
      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2)";
  for (const char* architectures : {"", R"("architectures": ["LlamaForCausalLM"], )",
                                    R"("architectures": ["Qwen2ForCausalLM"], )"}) {
    CAPTURE(architectures);
    const Failure none = failure_of(std::string("{") + architectures + body + "}");
    CHECK(none.field == "config.json: model_type");
    CHECK(contains(none.message, "missing"));
    CHECK(contains(none.message, "llama, qwen2, qwen3, mistral"));
  }
  CHECK(failure_of(R"({"model_type": null, )" + body + "}").field == "config.json: model_type");

  const Failure gpt2 = failure_of(R"({"model_type": "gpt2", )" + body + "}");
  CHECK(gpt2.field == "config.json: model_type");
  CHECK(contains(gpt2.message, "'gpt2'"));
  CHECK(contains(gpt2.message, "llama, qwen2, qwen3, mistral"));

  // architectures is not read: the type alone decides.
  CHECK(parse_hf_config(R"({"model_type": "qwen2", "architectures": ["LlamaForCausalLM"], )" + body + "}").shape.qkv_bias);
  CHECK(failure_of(R"({"model_type": 7, )" + body + "}").field == "config.json: model_type");
  // Case matters, as in transformers' CONFIG_MAPPING.
  CHECK(failure_of(R"({"model_type": "Llama", )" + body + "}").field == "config.json: model_type");
}

// A Mixtral config relabelled model_type mistral predicted 7.24B parameters, its experts ignored:
// every key of a structure vramfit does not model is refused, naming the key.
TEST_CASE("keys of structures not modelled are refused, naming the key") {
  const std::string mixtral = R"({"architectures": ["MixtralForCausalLM"], "model_type": "mistral",
      "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
      "sliding_window": null, "torch_dtype": "bfloat16"})";
  const Failure f = failure_of(mixtral);
  CHECK(f.field == "config.json: num_local_experts");
  CHECK(contains(f.message, "mixture-of-experts"));
  CHECK(contains(f.message, "not modelled"));

  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
                          "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "shared_expert_intermediate_size"}) {
    CAPTURE(key);
    const std::string member = std::string(1, '"').append(key).append("\": ");  // "key": and a value
    const std::string field = std::string("config.json: ").append(key);
    CHECK(failure_of(llama(member + "8")).field == field);
    CHECK(failure_of(llama(std::string(R"("model_type": "qwen2", )").append(member).append("8"))).field == field);
    // Null or 0: no experts.
    CHECK(failure_of(llama(member + "null")).field == "<parsed>");
    CHECK(failure_of(llama(member + "0")).field == "<parsed>");
  }
  const Failure quantized = failure_of(llama(R"("quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true})"));
  CHECK(quantized.field == "config.json: quantization_config");
  CHECK(contains(quantized.message, "quantized"));
}

// "torch_dtype": "float32" was ignored (bf16 assumed): it is read into HfConfig::dtype, for the
// caller's default precision; an unknown one is refused.
TEST_CASE("torch_dtype and dtype are read, or refused when vramfit does not model them") {
  using vramfit::Precision;
  CHECK(parse_hf_config(llama(R"("torch_dtype": "float32")")).dtype == Precision::fp32);
  CHECK(parse_hf_config(llama(R"("torch_dtype": "float16")")).dtype == Precision::fp16);
  CHECK(parse_hf_config(llama(R"("torch_dtype": "bfloat16")")).dtype == Precision::bf16);
  CHECK(parse_hf_config(llama(R"("torch_dtype": "half")")).dtype == Precision::fp16);
  CHECK(parse_hf_config(llama(R"("torch_dtype": "float")")).dtype == Precision::fp32);
  CHECK_FALSE(parse_hf_config(llama()).dtype.has_value());
  CHECK_FALSE(parse_hf_config(llama(R"("torch_dtype": null)")).dtype.has_value());
  // transformers 4.56+ writes `dtype`.
  CHECK(parse_hf_config(llama(R"("dtype": "float32")")).dtype == Precision::fp32);
  CHECK(parse_hf_config(llama(R"("dtype": "float16", "torch_dtype": "float16")")).dtype == Precision::fp16);
  CHECK(failure_of(llama(R"("dtype": "float16", "torch_dtype": "float32")")).field == "config.json: torch_dtype");

  const Failure f64 = failure_of(llama(R"("torch_dtype": "float64")"));
  CHECK(f64.field == "config.json: torch_dtype");
  CHECK(contains(f64.message, "'float64'"));
  CHECK(contains(f64.message, "bfloat16, float16, float32"));
  CHECK(failure_of(llama(R"("dtype": "int8")")).field == "config.json: dtype");
  CHECK(failure_of(llama(R"("torch_dtype": 32)")).field == "config.json: torch_dtype");

  // The public configs say bfloat16.
  for (const char* name : {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B", "Mistral-7B-v0.1"}) {
    CAPTURE(name);
    CHECK(load_hf_config(configs / (std::string(name) + ".json")).dtype == Precision::bf16);
  }
}

// Mistral's sliding window, and Qwen2's where a layer uses it: read, and a step whose sequence
// reaches it (transformers then builds an explicit window mask) refused by validate(step, config).
TEST_CASE("sliding windows are read as the transformers classes read them") {
  const auto window = [](const std::string& type, const std::string& extra) {
    return parse_hf_config(llama(R"("model_type": ")" + type + "\"" + (extra.empty() ? "" : ", " + extra)))
        .sliding_window;
  };
  CHECK(window("mistral", "") == 4096u);  // MistralConfig's default
  CHECK(window("mistral", R"("sliding_window": 1024)") == 1024u);
  CHECK_FALSE(window("mistral", R"("sliding_window": null)").has_value());
  // LlamaModel has no window.
  CHECK_FALSE(window("llama", R"("sliding_window": 1024)").has_value());
  // Qwen2: only with use_sliding_window, from max_window_layers on (3 layers here).
  CHECK_FALSE(window("qwen2", R"("sliding_window": 1024)").has_value());
  CHECK_FALSE(window("qwen2", R"("sliding_window": 1024, "use_sliding_window": false)").has_value());
  CHECK_FALSE(window("qwen2", R"("sliding_window": 1024, "use_sliding_window": true)").has_value());  // default 28 >= 3
  CHECK(window("qwen2", R"("sliding_window": 1024, "use_sliding_window": true, "max_window_layers": 2)") == 1024u);
  CHECK_FALSE(window("qwen2", R"("sliding_window": 1024, "use_sliding_window": true, "max_window_layers": 3)").has_value());
  CHECK(window("qwen2", R"("sliding_window": 1024, "use_sliding_window": true, "layer_types":
      ["full_attention", "full_attention", "sliding_attention"])") == 1024u);
  CHECK_FALSE(window("qwen2", R"("sliding_window": 1024, "use_sliding_window": true, "max_window_layers": 0,
      "layer_types": ["full_attention", "full_attention", "full_attention"])").has_value());
  CHECK(failure_of(llama(R"("model_type": "mistral", "sliding_window": 0)")).field == "config.json: sliding_window");

  // The public configs: Mistral-7B-v0.1 has a 4096 window; Qwen2.5's is off.
  CHECK(load_hf_config(configs / "Mistral-7B-v0.1.json").sliding_window == 4096u);
  CHECK_FALSE(load_hf_config(configs / "Qwen2.5-0.5B.json").sliding_window.has_value());
}

TEST_CASE("validate(step, config) refuses a sequence that reaches the sliding window") {
  using vramfit::Step;
  using vramfit::test::field_of;
  const vramfit::HfConfig mistral = load_hf_config(configs / "Mistral-7B-v0.1.json");
  CHECK(field_of([&] { validate(Step{.seq = 4095}, mistral); }) == "<no error>");
  CHECK(field_of([&] { validate(Step{.seq = 4096}, mistral); }) == "seq");
  CHECK(field_of([&] { validate(Step{.seq = 8192}, mistral); }) == "seq");
  // And the shape's own checks.
  CHECK(field_of([&] { validate(Step{.batch = 0}, mistral); }) == "batch");
  const vramfit::HfConfig qwen = load_hf_config(configs / "Qwen2.5-0.5B.json");
  CHECK(field_of([&] { validate(Step{.seq = 1ULL << 20}, qwen); }) == "<no error>");
  try {
    validate(Step{.seq = 4096}, mistral);
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(contains(e.what(), "sliding_window (4096)"));
  }
}

// num_hidden_layers up to 100000 was accepted; the config's names carry the shape's bounds.
TEST_CASE("dimensions beyond real models are refused under their config.json names") {
  const Failure layers = failure_of(llama(R"("num_hidden_layers": 100000)"));
  CHECK(layers.field == "config.json: num_hidden_layers");
  CHECK(contains(layers.message, "between 1 and 256"));
  CHECK(failure_of(llama(R"("vocab_size": 8388608)")).field == "config.json: vocab_size");
  CHECK(failure_of(llama(R"("num_attention_heads": 2048, "hidden_size": 32768)")).field ==
        "config.json: num_attention_heads");
  CHECK(failure_of(llama(R"("hidden_size": 131072, "head_dim": 64)")).field == "config.json: hidden_size");
}

TEST_CASE("multimodal configs are refused, not read from their text_config") {
  const Failure f = failure_of(R"({"model_type": "llava", "text_config": {"model_type": "llama"}})");
  CHECK(f.field == "config.json: model_type");
  CHECK(contains(f.message, "'llava'"));
  CHECK(contains(f.message, "multimodal"));
}

TEST_CASE("integers must be non-negative JSON integers") {
  struct Bad {
    const char* member;
    const char* field;
    const char* says;
  };
  for (const Bad b : {Bad{R"("hidden_size": "64")", "config.json: hidden_size", "a string"},
                      Bad{R"("hidden_size": 64.0)", "config.json: hidden_size", "without a fraction"},
                      Bad{R"("hidden_size": 64.5)", "config.json: hidden_size", "without a fraction"},
                      Bad{R"("hidden_size": 6.4e1)", "config.json: hidden_size", "without a fraction"},
                      Bad{R"("hidden_size": -64)", "config.json: hidden_size", "non-negative"},
                      Bad{R"("hidden_size": -64.5)", "config.json: hidden_size", "non-negative"},
                      Bad{R"("hidden_size": true)", "config.json: hidden_size", "a boolean"},
                      Bad{R"("hidden_size": null)", "config.json: hidden_size", "null"},
                      Bad{R"("hidden_size": [64])", "config.json: hidden_size", "an array"},
                      Bad{R"("hidden_size": {"value": 64})", "config.json: hidden_size", "an object"},
                      Bad{R"("hidden_size": 99999999999999999999999)", "config.json: hidden_size", "out of range"},
                      Bad{R"("num_key_value_heads": "2")", "config.json: num_key_value_heads", "a string"},
                      Bad{R"("head_dim": 16.0)", "config.json: head_dim", "without a fraction"},
                      Bad{R"("head_dim": 0)", "config.json: head_dim", "positive"},
                      Bad{R"("tie_word_embeddings": 1)", "config.json: tie_word_embeddings", "true or false"},
                      Bad{R"("tie_word_embeddings": "true")", "config.json: tie_word_embeddings", "true or false"},
                      Bad{R"("attention_bias": "no")", "config.json: attention_bias", "true or false"}}) {
    CAPTURE(b.member);
    const Failure f = failure_of(llama(b.member));
    CHECK(f.field == b.field);
    CHECK(contains(f.message, b.says));
  }
}

TEST_CASE("missing required fields are named") {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"}) {
    CAPTURE(field);
    nlohmann::json config = nlohmann::json::parse(llama());
    config.erase(field);
    const Failure f = failure_of(config.dump());
    CHECK(f.field == std::string("config.json: ") + field);
    CHECK(contains(f.message, "missing"));
  }
}

TEST_CASE("inconsistent shapes are refused by validate, naming the config.json field") {
  const Failure kv = failure_of(llama(R"("num_key_value_heads": 3)"));
  CHECK(kv.field == "config.json: num_key_value_heads");
  CHECK(kv.message == "config.json: num_key_value_heads: must divide heads (4), got 3");
  CHECK(failure_of(llama(R"("num_key_value_heads": 8)")).field == "config.json: num_key_value_heads");
  CHECK(failure_of(llama(R"("hidden_size": 0)")).field == "config.json: hidden_size");
  CHECK(failure_of(llama(R"("vocab_size": 0)")).field == "config.json: vocab_size");
  CHECK(failure_of(llama(R"("num_hidden_layers": 0)")).field == "config.json: num_hidden_layers");
  CHECK(failure_of(llama(R"("num_attention_heads": 0)")).field == "config.json: num_attention_heads");
  CHECK(failure_of(llama(R"("intermediate_size": 4294967296)")).field == "config.json: intermediate_size");
  // hidden 66 is no multiple of 4 heads, and head_dim is not given.
  CHECK(failure_of(llama(R"("hidden_size": 66)")).field == "config.json: head_dim");
  CHECK(failure_of(llama(R"("hidden_size": 66, "head_dim": 16)")).field == "<parsed>");
}

TEST_CASE("Llama's mlp_bias is refused: the shape has no MLP biases") {
  CHECK(failure_of(llama(R"("mlp_bias": false)")).field == "<parsed>");
  const Failure f = failure_of(llama(R"("mlp_bias": true)"));
  CHECK(f.field == "config.json: mlp_bias");
  CHECK(failure_of(llama(R"("mlp_bias": 0)")).field == "config.json: mlp_bias");
}

TEST_CASE("malformed JSON names the source and the position") {
  const Failure f = failure_of(R"({"model_type": "llama",
  "vocab_size": 1000
  "hidden_size": 64})");
  CHECK(f.field == "config.json");
  CHECK(contains(f.message, "malformed JSON"));
  CHECK(contains(f.message, "line 3"));

  // A number past double's range is a parse failure too.
  const Failure overflow = failure_of(llama(R"("vocab_size": 1e400)"));
  CHECK(overflow.field == "config.json");
  CHECK(contains(overflow.message, "1e400"));

  // Found by tests/fuzz: describing a value nested 100,000 deep overflowed the stack
  // (nlohmann's dump recurses); the error shows its first level only.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const Failure nested = failure_of(R"({"model_type": )" + deep + "}");
  CHECK(nested.field == "config.json: model_type");
  CHECK(contains(nested.message, "an array ([[...]])"));
  CHECK(contains(failure_of(llama(R"("hidden_size": "a string longer than the forty characters shown")")).message, "forty chara...)"));

  CHECK(failure_of("").field == "config.json");
  CHECK(failure_of("{").field == "config.json");
  // Valid JSON, but not an object.
  const Failure array = failure_of("[1, 2]");
  CHECK(array.field == "config.json");
  CHECK(contains(array.message, "object"));
  // A source name of the caller's choosing.
  try {
    (void)parse_hf_config(llama(R"("hidden_size": "64")"), "models/x/config.json");
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(e.field() == "models/x/config.json: hidden_size");
  }
}

TEST_CASE("broken fixture files") {
  struct Broken {
    const char* file;
    const char* json_field;  // empty: the error names the file itself
    const char* says;
  };
  for (const Broken b : {Broken{"broken-missing-hidden_size.json", "hidden_size", "missing"},
                         Broken{"broken-string-num_hidden_layers.json", "num_hidden_layers", "a string"},
                         Broken{"broken-negative-vocab_size.json", "vocab_size", "non-negative"},
                         Broken{"broken-fractional-intermediate_size.json", "intermediate_size", "fraction"},
                         Broken{"broken-unsupported-model_type.json", "model_type", "'gpt2'"},
                         Broken{"broken-kv_heads-not-dividing.json", "num_key_value_heads", "divide"},
                         Broken{"broken-malformed.json", "", "line 11"}}) {
    CAPTURE(b.file);
    const std::filesystem::path path = configs / b.file;
    const std::string source = path.string();
    const Failure f = failure_of_file(path);
    CHECK(f.field == (*b.json_field ? source + ": " + b.json_field : source));
    CHECK(contains(f.message, b.says));
    // The text alone, under the default source name.
    const Failure text = failure_of(read_text(path));
    CHECK(text.field == (*b.json_field ? std::string("config.json: ") + b.json_field : std::string("config.json")));
  }
}

TEST_CASE("unreadable files name --config, the path and the reason") {
  const Failure missing = failure_of_file(configs / "no-such-config.json");
  CHECK(missing.field == "--config");
  CHECK(contains(missing.message, "no-such-config.json"));
  CHECK(contains(missing.message, "No such file or directory"));

  const Failure directory = failure_of_file(configs);
  CHECK(directory.field == "--config");
  CHECK(contains(directory.message, "Is a directory"));
}

#else
TEST_CASE("config_json.hpp needs nlohmann-json" * doctest::skip()) {}
#endif
