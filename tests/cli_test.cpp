// The vramfit command line, run in-process (vramfit::cli::run): every subcommand's output, exit
// status (0, 2 bad input, 3 does not fit) and the one error line naming the flag. A few runs of
// the real executable stay in examples/tests.cmake.
#ifdef VRAMFIT_HAS_CLI
#include <doctest/doctest.h>

#include <stdio.h>  // open_memstream (POSIX)

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "vramfit/estimate.hpp"
#include "vramfit/gpus.hpp"

namespace {

/// What one run wrote, and its exit status.
struct Ran {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs `vramfit ARGS...` in-process and captures stdout and stderr.
Ran run_vramfit(const std::vector<std::string>& args) {
  char* out_text = nullptr;
  char* err_text = nullptr;
  std::size_t out_size = 0, err_size = 0;
  std::FILE* out = open_memstream(&out_text, &out_size);
  std::FILE* err = open_memstream(&err_text, &err_size);
  REQUIRE(out != nullptr);
  REQUIRE(err != nullptr);
  const std::vector<std::string_view> views(args.begin(), args.end());
  Ran r;
  r.status = vramfit::cli::run(views, out, err);
  std::fclose(out);
  std::fclose(err);
  r.out.assign(out_text, out_size);
  r.err.assign(err_text, err_size);
  std::free(out_text);
  std::free(err_text);
  return r;
}

/// `vramfit ARGS...` exits `status` with nothing on stderr.
Ran succeeds(int status, const std::vector<std::string>& args) {
  const Ran r = run_vramfit(args);
  INFO("stdout: ", r.out);
  CHECK(r.status == status);
  CHECK(r.err.empty());
  return r;
}

/// Every pattern (ECMAScript; "." does not cross lines) matches somewhere in `text`.
void matches(const std::string& text, std::initializer_list<const char*> patterns) {
  for (const char* pattern : patterns) CHECK_MESSAGE(std::regex_search(text, std::regex(pattern)), pattern, "\n", text);
}

/// `text` holds every piece.
void holds(const std::string& text, std::initializer_list<std::string_view> pieces) {
  for (std::string_view piece : pieces) CHECK_MESSAGE(text.find(piece) != std::string::npos, piece, "\n", text);
}

/// Bad input: exit 2, nothing on stdout, one line on stderr, "vramfit: error: ...", naming `flag`.
void fails_naming(std::string_view flag, const std::vector<std::string>& args) {
  const Ran r = run_vramfit(args);
  INFO("stderr: ", r.err);
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(std::regex_match(r.err, std::regex("vramfit: error: [^\n]+\n")));
  CHECK(r.err.find(flag) != std::string::npos);
}

/// stdout as one JSON object (the whole output, one trailing newline).
nlohmann::json json_object(const Ran& r) {
  REQUIRE(!r.out.empty());
  CHECK(r.out.back() == '\n');
  nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j.is_object());
  return j;
}

/// stdout as JSON lines, one object a line.
std::vector<nlohmann::json> json_lines(const Ran& r) {
  std::vector<nlohmann::json> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = r.out.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(nlohmann::json::parse(r.out.substr(start, end - start)));
    CHECK(lines.back().is_object());
  }
  CHECK(start == r.out.size());  // every line ends with a newline
  return lines;
}

bool is_count(const nlohmann::json& j) { return j.is_number_unsigned(); }
bool is_key(const nlohmann::json& j) {
  return j.is_string() && std::regex_match(j.get<std::string>(), std::regex("[a-z_]+"));
}

/// `COMMAND --model SmolLM2-135M REST...`: the small built-in model most runs use.
std::vector<std::string> on_small(const std::string& command, std::initializer_list<std::string> rest = {}) {
  std::vector<std::string> args = {command, "--model", "SmolLM2-135M"};
  args.insert(args.end(), rest);
  return args;
}

std::string data_file(const std::string& name) { return std::string(VRAMFIT_TEST_DATA_DIR) + "/" + name; }
std::string trace_file(const std::string& name) { return data_file("traces/" + name); }

/// Config files for --config, written once.
struct Configs {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "vramfit_cli_test_configs";
  Configs() {
    std::filesystem::create_directories(dir);
    write("tiny-llama.json", R"({
  "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 2048,
  "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
  "tie_word_embeddings": false
}
)");
    write("string-hidden-size.json", R"({
  "model_type": "llama", "vocab_size": 32000, "hidden_size": "2048", "intermediate_size": 5632,
  "num_hidden_layers": 22, "num_attention_heads": 32
}
)");
    write("malformed.json", "{\"model_type\": \"llama\",\n \"vocab_size\": 32000,,}\n");
    write("window-1.json", R"({
  "model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 1
}
)");
  }
  void write(const std::string& name, const std::string& text) const { std::ofstream(dir / name) << text; }
  [[nodiscard]] std::string operator/(const std::string& name) const { return (dir / name).string(); }
};
const Configs& configs() {
  static const Configs c;
  return c;
}

/// The flags every subcommand on a model lists in its help.
const std::initializer_list<std::string_view> model_flags = {
    "--model", "--config", "--mode",  "--lora-rank", "--lora-targets", "--grad-ckpt", "--logits-retained",
    "--attention", "--stack", "--phase", "--precision", "--budget", "--json", "--help"};

}  // namespace

TEST_CASE("cli: the report, the version and the help") {
  SUBCASE("report") {
    const Ran r = succeeds(0, {});
    holds(r.out, {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B", "Qwen2.5-7B", "Llama-3.1-8B", "full fine-tuning",
                  "all-linear, gradient checkpointing", "loss backward", "RTX-3050-Laptop-4GB", "A10G",
                  "\nbasis: closed form; hf-peft as recorded on "});  // the report says how, too
    // The card table: every card of gpus.hpp with its budget; the model table's columns by --gpu name.
    for (const vramfit::Gpu& g : vramfit::gpus)
      holds(r.out, {fmt::format("{:.3f}", g.allocator_budget().gigabytes())});
    matches(r.out, {"H200 +150.110 +149.306 +measured", "RTX-4090 +A100-40GB +H100-80GB +H200\n"});
  }
  SUBCASE("the README's example output is what the report prints") {
    std::ifstream readme(std::string(VRAMFIT_TEST_DATA_DIR) + "/../../README.md");
    REQUIRE(readme.good());
    const std::string text((std::istreambuf_iterator<char>(readme)), std::istreambuf_iterator<char>());
    const std::string start = "It prints (abridged):\n```\n";
    const auto from = text.find(start);
    REQUIRE(from != std::string::npos);
    const auto to = text.find("```", from + start.size());
    REQUIRE(to != std::string::npos);
    const std::string report = succeeds(0, {}).out;
    std::size_t lines = 0;
    for (std::size_t at = from + start.size(), end; at < to; at = end + 1) {
      end = text.find('\n', at);
      const std::string line = text.substr(at, end - at);
      if (line == "..." || line.empty()) continue;
      CHECK_MESSAGE(report.find(line + "\n") != std::string::npos, line);
      ++lines;
    }
    CHECK(lines >= 8);
  }
  SUBCASE("version") {
    const Ran r = succeeds(0, {"--version"});
    CHECK(std::regex_match(r.out, std::regex("vramfit [0-9]+\\.[0-9]+\\.[0-9]+\n")));
  }
  SUBCASE("help") {
    holds(succeeds(0, {"--help"}).out,
          {"usage: vramfit", "predict", "max-batch", "max-seq", "sweep", "presets", "probe", "exit status"});
    holds(succeeds(0, {"-h"}).out, {"usage: vramfit"});
  }
  SUBCASE("help.predict") {
    const Ran r = succeeds(0, {"predict", "--help"});
    holds(r.out, model_flags);
    holds(r.out, {"usage: vramfit predict", "--batch N\n", "--seq N\n", "lora|full", "flash|mem-efficient|math",
                  "hf-peft|hf-trainer|libtorch", "first|steady", "bf16|fp16|fp32", "default 2048", "exit status"});
    holds(r.out, {"--world-size N\n", "--sharding none|zero1|zero2|full|hybrid:K\n"});  // help.sharding
  }
  SUBCASE("help.max-batch") {
    const Ran r = succeeds(0, {"max-batch", "-h"});
    matches(r.out, {"usage: vramfit max-batch .*--budget SIZE"});
    holds(r.out, model_flags);
    holds(r.out, {"--seq N"});
  }
  SUBCASE("help.max-seq") {
    const Ran r = succeeds(0, {"max-seq", "--help"});
    matches(r.out, {"usage: vramfit max-seq .*--budget SIZE"});
    holds(r.out, model_flags);
    holds(r.out, {"--batch N", "--world-size N", "--sharding"});  // and help.max-seq.sharding
  }
  SUBCASE("help.sweep") {
    const Ran r = succeeds(0, {"sweep", "--help"});
    holds(r.out, model_flags);
    holds(r.out, {"usage: vramfit sweep", "--batch N[,N...]", "--seq N[,N...]", "JSON lines"});
  }
  SUBCASE("help.presets") { holds(succeeds(0, {"presets", "--help"}).out, {"usage: vramfit presets", "--json"}); }
  SUBCASE("help.replay") { holds(succeeds(0, {"replay", "--help"}).out, {"usage: vramfit replay", "--data"}); }
  SUBCASE("help wins over bad flags") {
    holds(succeeds(0, {"predict", "--batch", "0", "--help"}).out, {"usage: vramfit predict"});
    // CLI11 takes the next argument as the value, even --help: still the help.
    holds(succeeds(0, {"predict", "--seq", "--help"}).out, {"usage: vramfit predict"});
  }
  SUBCASE("help.probe") {
#ifdef VRAMFIT_WITH_PROBE
    holds(succeeds(0, {"probe", "--help"}).out, {"usage: vramfit probe", "--instruments", "--repeats"});
#else
    holds(succeeds(0, {"probe", "--help"}).out, {"usage: vramfit probe", "not in this build"});
#endif
  }
}

TEST_CASE("cli: predict") {
  SUBCASE("predict") {
    matches(succeeds(0, on_small("predict")).out,
            {"model: +SmolLM2-135M", "stack: +hf-peft", "peak: +[0-9.]+ GB allocated, in the [a-z]",
             "required: +[0-9.]+ GB", "parameters +[0-9.]+", "activations +[0-9.]+", "logits +[0-9.]+",
             "workspace +[0-9.]+", "total +[0-9.]+", "backward\\*"});
  }
  SUBCASE("predict.json") {
    // The estimate's schema (vramfit/json.hpp) with the budget's fields, the model and the step.
    nlohmann::json j = json_object(succeeds(0, on_small("predict", {"--json"})));
    CHECK(is_count(j["peak_bytes"]));
    CHECK(is_count(j["required_bytes"]));
    CHECK(is_key(j["phase"]));
    CHECK(j["stack"] == "hf-peft");
    nlohmann::json& closed_form = j["closed_form"];
    CHECK(is_key(closed_form["phase"]));
    CHECK(is_count(closed_form["phases"]["optimizer_step"]));
    REQUIRE(closed_form["terms"].is_array());
    CHECK(std::any_of(closed_form["terms"].begin(), closed_form["terms"].end(),
                      [](nlohmann::json& t) { return t["name"] == "logits"; }));
    CHECK(j["model"]["vocab"] == 49152);
    CHECK(j["step"]["seq"] == 2048);
    CHECK(j["step"]["lora_targets"].is_array());
    CHECK(j["step"]["world_size"] == 1);  // predict.sharding.default.json
    CHECK(j["step"]["sharding"] == "none");
  }
  SUBCASE("predict.fits") {
    matches(succeeds(0, on_small("predict", {"--budget", "24GiB"})).out,
            {"\nfits the budget of 25.770 GB .*headroom"});
  }
  SUBCASE("predict.fits.json") {
    nlohmann::json j = json_object(succeeds(0, on_small("predict", {"--budget", "24GiB", "--json"})));
    CHECK(j["fits"] == true);
    CHECK(j["budget_bytes"] == 25769803776ULL);
    CHECK(is_count(j["headroom_bytes"]));
  }
  SUBCASE("predict.does_not_fit") {
    matches(succeeds(3, {"predict", "--model", "Qwen2.5-7B", "--mode", "full", "--budget", "24GB"}).out,
            {"\ndoes not fit the budget of 24.000 GB \\(22.35 GiB\\): requires [0-9.]+ GB, [0-9.]+ GB over\n"});
  }
  SUBCASE("predict.does_not_fit.json") {
    nlohmann::json j =
        json_object(succeeds(3, {"predict", "--model", "Qwen2.5-7B", "--mode", "full", "--budget=24GB", "--json"}));
    CHECK(j["fits"] == false);
    CHECK(is_count(j["shortfall_bytes"]));
    CHECK(j["budget_bytes"] == 24000000000ULL);
  }
  SUBCASE("predict.every_flag") {
    nlohmann::json j = json_object(
        succeeds(0, {"predict", "--model=smollm2-135m", "--batch", "2", "--seq", "1024", "--mode", "lora",
                     "--lora-rank", "16", "--lora-targets", "all-linear", "--grad-ckpt", "--logits-retained",
                     "--attention", "math", "--stack", "libtorch", "--phase", "first", "--precision", "fp16",
                     "--json"}));
    nlohmann::json& step = j["step"];
    CHECK(step["batch"] == 2);
    CHECK(step["seq"] == 1024);
    CHECK(step["lora_rank"] == 16);
    CHECK(std::count(step["lora_targets"].begin(), step["lora_targets"].end(), "down_proj") == 1);
    CHECK(step["gradient_checkpointing"] == true);
    CHECK(step["logits_retained"] == true);
    CHECK(step["attention"] == "math");
    CHECK(j["stack"] == "libtorch");
    CHECK(step["peak_over"] == "first");
    CHECK(step["precision"] == "fp16");
    CHECK(j["model"]["name"] == "SmolLM2-135M");
  }
  SUBCASE("predict.full") {
    holds(succeeds(0, on_small("predict", {"--mode", "full", "--precision", "fp32"})).out,
          {"full fine-tuning", "fp32"});
  }
  SUBCASE("predict.config") {
    const Ran r = succeeds(0, {"predict", "--config", configs() / "tiny-llama.json"});
    matches(r.out, {"model: +.*tiny-llama.json: vocab 32000, hidden 2048"});
    holds(r.out, {"1.10B parameters"});
  }
  SUBCASE("predict.config.json") {
    nlohmann::json j = json_object(succeeds(0, {"predict", "--config", configs() / "tiny-llama.json", "--json"}));
    REQUIRE(j["model"]["config"].is_string());
    CHECK(j["model"]["config"].get<std::string>().ends_with("tiny-llama.json"));
    CHECK(j["model"]["kv_heads"] == 4);
  }
}

TEST_CASE("cli: max-batch and max-seq") {
  SUBCASE("max-batch") {
    matches(succeeds(0, on_small("max-batch", {"--budget", "24GiB"})).out,
            {"budget: +25.770 GB \\(24.00 GiB\\)", "max batch: [1-9][0-9]*\n", "at batch [1-9][0-9]*: peak"});
  }
  SUBCASE("max-batch.json") {
    nlohmann::json j =
        json_object(succeeds(0, on_small("max-batch", {"--seq", "4096", "--budget", "24GiB", "--json"})));
    CHECK(j["max_batch"] >= 1);
    CHECK(j["budget_bytes"] == 25769803776ULL);
    CHECK(j["prediction"].is_object());
    CHECK(j["step"]["seq"] == 4096);
  }
  SUBCASE("max-batch.nothing_fits") {
    holds(succeeds(3, {"max-batch", "--model", "Qwen2.5-7B", "--mode", "full", "--budget", "2GB"}).out,
          {"max batch: 0: not even batch 1 fits", "basis:  closed form; ",
           "no allocator simulation there: "});  // the gap, as predict says it
    nlohmann::json j =
        json_object(succeeds(3, {"max-batch", "--model", "Qwen2.5-7B", "--mode", "full", "--budget", "2GB", "--json"}));
    CHECK(j["max_batch"] == 0);
  }
  SUBCASE("max-seq") {
    matches(succeeds(0, on_small("max-seq", {"--budget", "24GiB"})).out,
            {"max seq: [1-9][0-9]*\n"});
  }
  SUBCASE("max-seq.json") {
    nlohmann::json j = json_object(
        succeeds(0, on_small("max-seq", {"--batch", "2", "--grad-ckpt", "--budget", "80GB", "--json"})));
    CHECK(j["max_seq"] >= 1);
    CHECK(j["step"]["batch"] == 2);
    CHECK(is_key(j["prediction"]["phase"]));
  }
  SUBCASE("max-seq.sliding_window") {
    // Mistral's window (4096): the search tries no longer sequence, and says where it stopped.
    const std::string mistral = data_file("configs/Mistral-7B-v0.1.json");
    nlohmann::json j = json_object(succeeds(0, {"max-seq", "--config", mistral, "--budget", "111GB", "--json"}));
    CHECK(j["max_seq"] == 4095);
    CHECK(j["capped"] == true);
    holds(succeeds(0, {"max-seq", "--config", mistral, "--budget", "111GB"}).out,
          {"max seq: 4095\n", "(capped below the config's sliding window of 4096 tokens"});
    fails_naming("--config: sliding_window", {"max-seq", "--config", configs() / "window-1.json", "--budget", "80GB"});
  }
  SUBCASE("hf-trainer simulates the kinds its built-in programs hold, and says why not elsewhere") {
    nlohmann::json full = json_object(succeeds(0, on_small("predict", {"--stack", "hf-trainer", "--mode", "full", "--json"})));
    CHECK(full["method"] == "allocator simulation");
    CHECK(full["provenance"]["recorded_software"].get<std::string>().ends_with(", transformers.Trainer"));
    nlohmann::json acc = json_object(
        succeeds(0, on_small("predict", {"--stack", "hf-trainer", "--mode", "full", "--grad-accum", "2", "--json"})));
    CHECK(acc["method"] == "closed form");
    CHECK(acc["simulation"]["why"] == "recorded with gradient accumulation 1 only");
  }
}

TEST_CASE("cli: sweep") {
  SUBCASE("sweep") {
    const Ran r = succeeds(0, on_small("sweep", {"--seq", "1024,2048,4096", "--batch", "1,4"}));
    // Only the columns a prediction fills: no empty real, pred/real, verdict or realised columns.
    matches(r.out, {"\n +seq +batch +predicted\n", "\n *1024 +1 +[0-9.]+ GB\n",
                    "\n *4096 +4 +[0-9.]+ GB\n"});
    holds(r.out, {"stack:  hf-peft (allocator simulation)\n"});  // every row's method, one here
  }
  SUBCASE("sweep of both methods") {
    holds(succeeds(0, on_small("sweep", {"--seq", "100,1024"})).out,
          {"stack:  hf-peft (allocator simulation where a program applies, else closed form)\n"});
  }
  SUBCASE("sweep.budget") {
    matches(succeeds(3, on_small("sweep", {"--seq", "1024,8192", "--budget", "8GB"})).out,
            {"\n +seq +batch +predicted +fits\n", "\n *1024 +1 +[0-9.]+ GB +yes\n", "\n *8192 +1 +[0-9.]+ GB +no\n"});
  }
  SUBCASE("sweep.all_fit") {
    matches(succeeds(0, on_small("sweep", {"--seq", "1024,2048", "--budget", "80GB"})).out,
            {"yes\n[\\s\\S]*yes\n"});
  }
  SUBCASE("sweep.json") {
    // One estimate a line, as predict --json writes it, in the order seq then batch.
    auto lines = json_lines(
        succeeds(0, on_small("sweep", {"--seq", "1024,2048,4096", "--batch", "1,4", "--json"})));
    REQUIRE(lines.size() == 6);
    CHECK(lines[5]["step"]["seq"] == 4096);
    CHECK(lines[5]["step"]["batch"] == 4);
    CHECK(is_count(lines[5]["peak_bytes"]));
    for (nlohmann::json& j : lines) CHECK(is_key(j["phase"]));
  }
  SUBCASE("sweep.json.budget") {
    // With --json the status is 0 unless the input is bad: each line says whether its step fits.
    auto lines = json_lines(
        succeeds(0, on_small("sweep", {"--seq", "1024,8192", "--budget", "8GB", "--json"})));
    REQUIRE(lines.size() == 2);
    CHECK(lines[0]["fits"] == true);
    CHECK(lines[1]["fits"] == false);
  }
  SUBCASE("sweep_simulated_json") {
    auto lines = json_lines(succeeds(
        0, on_small("sweep", {"--seq", "1024,2048", "--lora-targets", "q_proj,v_proj", "--json"})));
    CHECK(std::any_of(lines.begin(), lines.end(),
                      [](nlohmann::json& j) { return j["method"] == "allocator simulation"; }));
  }
}

// Every answer says how it was obtained and how far it is checked: the same line in the text of
// predict, max-batch, max-seq and sweep, and in their JSON ("provenance"), from the library.
TEST_CASE("cli: the basis line: method, where the programs were recorded, what is not validated") {
  const vramfit::ProgramSet& hf = *vramfit::builtin_programs("hf-peft").set;
  const vramfit::ProgramSet& libtorch = *vramfit::builtin_programs("libtorch").set;
  const std::string recorded = "hf-peft as recorded on " + hf.gpu + " with " + hf.software;
  const std::string simulated = "basis:  allocator simulation; " + recorded;
  struct Case {
    std::vector<std::string> args;
    int status;
  };
  const std::vector<Case> cases = {
      {on_small("predict", {"--seq", "1024"}), 0},
      {on_small("max-batch", {"--seq", "1024", "--budget", "8GB"}), 0},
      {on_small("max-seq", {"--budget", "8GB"}), 0},
      {on_small("sweep", {"--seq", "1024,2048"}), 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args[0]);
    const Ran text = succeeds(c.status, c.args);
    std::vector<std::string> json_args = c.args;
    json_args.emplace_back("--json");
    const Ran json = succeeds(c.status, json_args);
    nlohmann::json j = c.args[0] == "sweep" ? json_lines(json).front() : json_object(json);
    const nlohmann::json& p = j["provenance"];
    REQUIRE(p["basis"].is_string());
    CHECK(p["recorded_gpu"] == hf.gpu);
    CHECK(p["recorded_software"] == hf.software);
    CHECK(p["programs"] == hf.source);
    CHECK(p["unvalidated"].is_null());
    REQUIRE(p["method"].is_string());
    CHECK(p["basis"].get<std::string>().starts_with(p["method"].get<std::string>() + "; " + recorded));
    holds(text.out, {"basis:  " + p["basis"].get<std::string>() + "\n"});
    if (c.args[0] == "predict") holds(text.out, {simulated});
  }
  SUBCASE("closed form and the libtorch stack") {
    holds(succeeds(0, on_small("predict", {"--seq", "100"})).out, {"basis:  closed form; " + recorded});
    holds(succeeds(0, on_small("predict", {"--stack", "libtorch"})).out,
          {"basis:  allocator simulation; libtorch as recorded on " + libtorch.gpu + " with " + libtorch.software});
  }
  SUBCASE("sharded: not validated on several GPUs; ZeRO in bf16 is not an upper bound") {
    const std::vector<std::string> zero2 = {"--model", "Qwen2.5-7B", "--mode", "full", "--world-size", "8",
                                            "--sharding", "zero2", "--budget", "80GB"};
    for (const std::string command : {"predict", "max-batch", "sweep"}) {
      CAPTURE(command);
      std::vector<std::string> args = {command};
      args.insert(args.end(), zero2.begin(), zero2.end());
      const Ran r = run_vramfit(args);
      holds(r.out, {"basis:  closed form; hf-peft as recorded on", "not validated on several GPUs",
                    "DeepSpeed's fp32 master copy is not counted, so not an upper bound"});
    }
    nlohmann::json j = json_object(succeeds(
        0, on_small("max-batch", {"--world-size", "4", "--sharding", "full", "--budget", "24GiB", "--json"})));
    REQUIRE(j["provenance"]["unvalidated"].is_string());
    CHECK(j["provenance"]["unvalidated"].get<std::string>().find("not validated on several GPUs") != std::string::npos);
    CHECK(j["provenance"]["basis"].get<std::string>().find("upper bound") == std::string::npos);  // FSDP2: no master copy
    CHECK(j["provenance"] == j["prediction"]["provenance"]);
  }
}

TEST_CASE("cli: several ranks, per-rank figures") {
  SUBCASE("predict.sharding.full") {
    matches(succeeds(0, {"predict", "--model", "Llama-3.1-8B", "--mode", "full", "--world-size", "8", "--sharding",
                         "full", "--budget", "80GB"})
                .out,
            {"step: .*, full sharding over 8 ranks, per rank\n",
             "\nranks: +full sharding over 8 ranks: every figure is per rank \\(rank 0, which holds the largest "
             "shard\\)",
             "parameters +[0-9.]+", "\nfits the budget of 80.000 GB"});
  }
  SUBCASE("predict.sharding.ddp") {
    matches(succeeds(0, on_small("predict", {"--world-size", "4"})).out,
            {"DDP over 4 ranks, per rank\n", "\nranks: +DDP over 4 ranks"});
  }
  SUBCASE("predict.sharding.json") {
    nlohmann::json j = json_object(
        succeeds(0, on_small("predict", {"--world-size", "16", "--sharding", "hybrid:4", "--json"})));
    CHECK(j["step"]["world_size"] == 16);
    CHECK(j["step"]["sharding"] == "hybrid:4");
    CHECK(is_count(j["peak_bytes"]));
  }
  SUBCASE("predict.sharding.full_on_one_rank") {
    holds(succeeds(0, on_small("predict", {"--sharding", "full", "--world-size", "1"})).out,
          {"full sharding over 1 rank, per rank"});
  }
  SUBCASE("predict.sharding.zero2") {
    holds(succeeds(0, {"predict", "--model", "Qwen2.5-7B", "--mode", "full", "--world-size", "8", "--sharding=zero2"})
              .out,
          {"ZeRO-2 over 8 ranks, per rank"});
  }
  SUBCASE("predict.sharding.one_card_does_not_fit") {
    // Full fine-tuning of an 8B model does not fit one 80 GB card; sharded over 8 it does.
    holds(succeeds(3, {"predict", "--model", "Llama-3.1-8B", "--mode", "full", "--budget", "80GB"}).out,
          {"does not fit the budget"});
  }
  SUBCASE("max-batch.sharding") {
    matches(succeeds(0, {"max-batch", "--model", "Llama-3.1-8B", "--mode", "full", "--world-size", "8", "--sharding",
                         "full", "--budget", "80GB"})
                .out,
            {"ranks: +full sharding over 8 ranks", "max batch: [1-9][0-9]*\n"});
  }
  SUBCASE("max-batch.sharding.json") {
    nlohmann::json j = json_object(succeeds(
        0, on_small("max-batch", {"--world-size", "2", "--sharding", "zero1", "--budget", "24GiB", "--json"})));
    CHECK(j["max_batch"] >= 1);
    CHECK(j["step"]["world_size"] == 2);
    CHECK(j["step"]["sharding"] == "zero1");
  }
  SUBCASE("max-seq.sharding") {
    const Ran r = succeeds(
        0, on_small("max-seq", {"--world-size", "8", "--sharding", "full", "--budget", "24GiB"}));
    holds(r.out, {"full sharding over 8 ranks"});
    matches(r.out, {"max seq: [1-9][0-9]*\n"});
  }
  SUBCASE("sweep.sharding") {
    matches(succeeds(0, on_small("sweep", {"--seq", "1024,2048", "--world-size", "4", "--sharding", "full"}))
                .out,
            {"ranks: +full sharding over 4 ranks", "\n *2048 +1 +[0-9.]+ GB\n"});
  }
  SUBCASE("sweep.sharding.json") {
    auto lines = json_lines(succeeds(
        0, on_small("sweep", {"--seq", "1024,2048", "--world-size", "4", "--sharding", "hybrid:2", "--json"})));
    REQUIRE(lines.size() == 2);
    for (nlohmann::json& j : lines) {
      CHECK(j["step"]["world_size"] == 4);
      CHECK(j["step"]["sharding"] == "hybrid:2");
    }
  }
}

TEST_CASE("cli: presets") {
  SUBCASE("presets") {
    const Ran r = succeeds(0, {"presets"});
    matches(r.out, {"model +parameters +vocab", "\nSmolLM2-135M +134.5M +49152 +576", "Llama-3.1-8B +8.03B"});
    holds(r.out, {"TinyLlama-1.1B"});
  }
  SUBCASE("presets.json") {
    nlohmann::json j = json_object(succeeds(0, {"presets", "--json"}));
    REQUIRE(j["presets"].is_array());
    auto& list = j["presets"];
    CHECK(std::any_of(list.begin(), list.end(), [](nlohmann::json& p) { return p["name"] == "Qwen2.5-7B"; }));
    CHECK(std::any_of(list.begin(), list.end(), [](nlohmann::json& p) { return p["parameters"] == 134515008; }));
  }
}

TEST_CASE("cli: bad input exits 2 with one line on stderr naming the flag, and with --json a JSON object") {
  const std::string configs_dir = configs().dir.string();
  // Bad values of one flag of `predict` on the small model, by flag.
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad_values = {
      {"--world-size", {"0", "65537", "eight"}},
      {"--sharding", {"zero3"}},
      {"--batch", {"0", "-1", "+1", "4x", "1.5", "99999999999999999999999", "2000000"}},
      {"--seq", {"20000000", "1024,2048"}},
      {"--lora-rank", {"0", "100000"}},
      {"--lora-targets", {"q_proj,x_proj", "q_proj,,v_proj"}},
      {"--mode", {"half"}},
      {"--attention", {"slow"}},
      {"--stack", {"jax"}},
      {"--phase", {"last"}},
      {"--precision", {"int8"}},
      {"--optim", {"adam", "adamw_bnb_8bit", ""}},
      {"--grad-accum", {"0", "65537", "two", "-1"}},
      {"--weights", {"int8", "float32"}},
      {"--lora-dropout", {"1", "-0.1", "0.5.", "nan", "1e2", "five", "0x1"}},
      {"--budget", {"0GB", "-1GB", "24XB", "99999999TB"}},
  };
  struct Case {
    const char* name;
    const char* flag;
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {
      // several ranks
      {"sharding_hybrid_zero", "--sharding",
       on_small("predict", {"--world-size", "4", "--sharding", "hybrid:0"})},
      {"sharding_hybrid_not_dividing", "--sharding",
       on_small("predict", {"--world-size", "4", "--sharding", "hybrid:3"})},
      {"sharding_hybrid_larger_than_world", "--sharding",
       on_small("max-batch", {"--world-size", "4", "--sharding", "hybrid:8", "--budget", "24GB"})},
      {"sharding_hybrid_not_a_number", "--sharding",
       on_small("predict", {"--world-size", "4", "--sharding", "hybrid:x"})},
      {"sharding_hybrid_without_group", "--sharding",
       on_small("predict", {"--world-size", "4", "--sharding", "hybrid"})},
      {"sharding_empty", "--sharding", on_small("predict", {"--sharding="})},
      {"sharding_not_in_presets", "--world-size", {"presets", "--world-size", "2"}},
#ifdef VRAMFIT_WITH_PROBE
      {"probe_takes_no_world_size", "--world-size", on_small("probe", {"--world-size", "2"})},
      {"probe_takes_no_sharding", "--sharding", on_small("probe", {"--sharding", "full"})},
#else
      {"probe_not_built", "probe", on_small("probe")},
#endif
      // the command line
      {"unknown_subcommand", "subcommand", {"frobnicate"}},
      {"unknown_top_level_option", "--frob", {"--frob"}},
      {"unknown_flag", "--frob", on_small("predict", {"--frob"})},
      {"single_dash_flag", "-b", on_small("predict", {"-b", "2"})},
      {"stray_argument", "stray", on_small("predict", {"stray"})},
      {"flag_of_another_command", "--model", on_small("presets")},
      {"missing_value_at_end", "--seq", on_small("predict", {"--seq"})},
      {"missing_value_before_flag", "--seq", {"predict", "--seq", "--model", "SmolLM2-135M"}},
      {"empty_value", "--batch", on_small("predict", {"--batch="})},
      {"given_twice", "--batch", on_small("predict", {"--batch", "1", "--batch", "2"})},
      {"switch_given_twice", "--grad-ckpt", on_small("predict", {"--grad-ckpt", "--grad-ckpt"})},
      {"switch_with_value", "--json", on_small("predict", {"--json=yes"})},
      // numbers
      {"batch_leading_space", "--batch", on_small("predict", {"--batch= 1"})},
      {"step_overflows", "--seq", on_small("predict", {"--batch", "1048576", "--seq", "16777216"})},
      // the model
      {"no_model", "--model", {"predict", "--seq", "1024"}},
      {"model_and_config", "--config",
       on_small("predict", {"--config", configs() / "tiny-llama.json"})},
      {"unknown_model", "--model", {"predict", "--model", "GPT-5"}},
      {"config_unreadable", "--config", {"predict", "--config", configs() / "absent.json"}},
      {"config_directory", "--config", {"predict", "--config", configs_dir}},
      {"config_bad_field", "hidden_size", {"predict", "--config", configs() / "string-hidden-size.json"}},
      {"config_malformed", "malformed JSON", {"predict", "--config", configs() / "malformed.json"}},
      // the step
      {"lora_rank_with_full", "--lora-rank", on_small("predict", {"--mode", "full", "--lora-rank", "8"})},
      {"lora_targets_with_full", "--lora-targets",
       on_small("predict", {"--lora-targets", "all-linear", "--mode", "full"})},
      {"lora_dropout_with_full", "--lora-dropout", on_small("predict", {"--mode", "full", "--lora-dropout", "0.1"})},
      {"libtorch_takes_no_dropout", "--lora-dropout",
       on_small("predict", {"--stack", "libtorch", "--lora-dropout", "0.1"})},
      {"libtorch_takes_no_sgd", "--optim", on_small("max-batch", {"--stack", "libtorch", "--optim", "sgd", "--budget", "24GB"})},
      // the Trainer's settings
      {"grad_accum_needs_trainer", "--grad-accum", on_small("predict", {"--grad-accum", "4"})},
      {"weights_need_trainer", "--weights", on_small("predict", {"--weights", "fp32"})},
      {"trainer_bf16_weights_no_autocast_fp32", "--weights",
       on_small("predict", {"--stack", "hf-trainer", "--weights", "bf16", "--precision", "fp32"})},
      {"trainer_fp16_weights_under_bf16", "--weights",
       on_small("predict", {"--stack", "hf-trainer", "--weights", "fp16", "--precision", "bf16"})},
      {"trainer_on_one_gpu", "--world-size", on_small("predict", {"--stack", "hf-trainer", "--world-size", "2"})},
      {"trainer_not_sharded", "--sharding", on_small("predict", {"--stack", "hf-trainer", "--sharding", "zero1"})},
      // Library errors about a step field name the flag: "weights" is --weights, "optim" --optim.
      {"trainer_no_fp16_full", "--weights",
       on_small("predict", {"--stack", "hf-trainer", "--mode", "full", "--precision", "fp16"})},
      {"adafactor_on_one_gpu", "--optim",
       on_small("predict", {"--optim", "adafactor", "--world-size", "2", "--sharding", "zero1"})},
      {"libtorch_no_qk_norm", "qk_norm", {"predict", "--model", "Qwen3-0.6B", "--stack", "libtorch"}},
#ifdef VRAMFIT_WITH_PROBE
      {"probe_runs_no_dropout", "--lora-dropout", on_small("probe", {"--lora-dropout", "0.05"})},
      {"probe_runs_adamw_only", "--optim", on_small("probe", {"--optim", "sgd-momentum"})},
      {"probe_runs_no_trainer", "--stack", on_small("probe", {"--stack", "hf-trainer"})},
#endif
      // the budget
      {"max-batch_needs_budget", "--budget", on_small("max-batch")},
      {"max-seq_needs_budget", "--budget", on_small("max-seq", {"--batch", "2"})},
      {"max-batch_takes_no_batch", "--batch", on_small("max-batch", {"--batch", "2", "--budget", "24GB"})},
      {"max-seq_takes_no_seq", "--seq", on_small("max-seq", {"--seq", "2", "--budget", "24GB"})},
      // lists
      {"sweep_empty_item", "--seq", on_small("sweep", {"--seq", "1024,,2048"})},
      {"sweep_trailing_comma", "--batch", on_small("sweep", {"--batch", "1,4,"})},
      {"sweep_bad_item", "--seq", on_small("sweep", {"--seq", "1024,two"})},
      {"sweep_item_beyond_limit", "--batch", on_small("sweep", {"--batch", "1,2000000"})},
      {"empty_argument", "arguments", on_small("max-batch", {"", "--budget", "24GB"})},
      {"sweep_too_many_steps", "--seq", on_small("sweep", {"--seq", "1,2,3,4,5,6,7,8,9", "--batch", "1,2,3,4"})},
      // replay
      {"replay_without_data", "--data", {"replay"}},
      {"replay_missing_file", "--data", {"replay", "--data", "/nonexistent/steps.jsonl"}},
      {"replay_bad_stack", "--stack", {"replay", "--data", "/nonexistent/steps.jsonl", "--stack", "tensorflow"}},
      {"replay_trace_and_data", "--trace",
       {"replay", "--trace", trace_file("x.jsonl"), "--data", "/nonexistent/steps.jsonl"}},
      {"replay_trace_with_stack", "--stack", {"replay", "--trace", trace_file("x.jsonl"), "--stack", "libtorch"}},
      {"replay_trace_missing_file", "--trace", {"replay", "--trace", "/nonexistent/trace.jsonl"}},
      {"replay_trace_not_a_trace", "--trace", {"replay", "--trace", data_file("hf_steps.jsonl")}},
      // Bytes that are not UTF-8 in the message: the JSON object shows them as U+FFFD (a finding of
      // fuzz_cli, tests/fuzz/corpus/cli/regression-path-not-utf8-json-error).
      {"replay_data_not_utf8", "--data", {"replay", "--data", "/nonexistent/\xff\xfe.jsonl"}},
  };
  std::vector<Case> all = cases;
  for (const auto& [flag, values] : bad_values)
    for (const std::string& value : values) all.push_back({value.c_str(), flag.c_str(), on_small("predict", {flag, value})});
  for (const Case& c : all) {
    CAPTURE(c.name);
    fails_naming(c.flag, c.args);
    // With --json the same line on stderr, and {"error": ..., "field": ...} on stdout for scripts.
    std::vector<std::string> json_args = c.args;
    json_args.emplace_back("--json");
    const Ran text = run_vramfit(c.args), json = run_vramfit(json_args);
    CHECK(json.status == 2);
    CHECK(json.err == text.err);
    const nlohmann::json j = json_object(json);
    REQUIRE(j["error"].is_string());
    REQUIRE(j["field"].is_string());
    CHECK(j.size() == 2);
    CHECK(text.err == "vramfit: error: " + j["field"].get<std::string>() + ": " + j["error"].get<std::string>() + "\n");
  }
}

TEST_CASE("cli: CLI11's own errors in vramfit's words") {
  const auto error = [](const std::vector<std::string>& args) { return run_vramfit(args).err; };
  CHECK(error(on_small("predict", {"--batch", "1", "--batch", "2"})) ==
        "vramfit: error: --batch: given twice; give it once\n");
  CHECK(error(on_small("predict", {"--json", "--json", "--json"})) ==
        "vramfit: error: --json: given 3 times; give it once\n");
  CHECK(error(on_small("predict", {"--seq"})) == "vramfit: error: --seq: missing value (expected N)\n");
  CHECK(error(on_small("predict", {"--json=yes"})) == "vramfit: error: --json: takes no value\n");
  CHECK(error({"presets", "--model", "SmolLM2-135M"}) ==
        "vramfit: error: --model: not taken by presets (see vramfit presets --help)\n");
  CHECK(error({"presets", "--frob"}) ==
        "vramfit: error: --frob: unknown flag for presets (see vramfit presets --help)\n");
  CHECK(error({"presets", "-f"}) == "vramfit: error: -f: unknown flag (see vramfit presets --help)\n");
  CHECK(error(on_small("predict", {":-conf--model"})) ==
        "vramfit: error: arguments: unexpected argument ':-conf--model' (see vramfit predict --help)\n");
}

TEST_CASE("cli: replay") {
  // Small files: a replay simulates every step (tests/data/hf_steps.jsonl takes seconds; the
  // executable's run in examples/tests.cmake replays it).
  SUBCASE("replay of measured steps") {
    const Ran r = succeeds(0, {"replay", "--data", data_file("hf_heldout_2.jsonl")});
    holds(r.out, {"over-predicts: safe", "rows of other kinds or with an error skipped"});
    matches(r.out, {"([0-9.]+ [GM]B) +\\1 +1\\.000x +exact"});  // an exact match says so, not "over-predicts"
  }
  SUBCASE("replay --json tells an exact prediction from an over-prediction") {
    auto lines = json_lines(succeeds(0, {"replay", "--data", data_file("libtorch_heldout_2.jsonl"), "--json"}));
    REQUIRE(!lines.empty());
    std::size_t exact = 0, over = 0;
    for (nlohmann::json& j : lines) {
      const auto predicted = j["predicted_bytes"].get<std::uint64_t>(), real = j["real_bytes"].get<std::uint64_t>();
      CHECK(j["verdict"] == (predicted == real ? "exact" : "over-predicts: safe"));
      (predicted == real ? exact : over) += 1;
      CHECK(j["step"].is_object());
    }
    CHECK(exact > 0);
    CHECK(over > 0);
  }
  SUBCASE("replay_trace") {
    matches(succeeds(0, {"replay", "--trace", trace_file("smollm2-135m-lora-r16-all-s1024.jsonl")}).out,
            {"measured +2.199 GB +2.148 GB +51.4 MB", "allocator model +2.199 GB +2.148 GB +51.4 MB", "exactly"});
  }
  SUBCASE("replay_trace_json") {
    const std::string trace = trace_file("qwen2.5-0.5b-lora-r8-attn-gc-s1024.jsonl");
    nlohmann::json j = json_object(succeeds(0, {"replay", "--json", "--trace", trace}));
    CHECK(j["model_replay"]["peak_allocated_bytes"] == 2995068928ULL);
    CHECK(j["model_replay"]["peak_requested_bytes"] == 2985238536ULL);
    CHECK(is_count(j["model_replay"]["reserved_bytes"]));
    CHECK(j["exact"] == true);
  }
}

// The exact path: a LoRA step of a recorded kind is simulated from its step program; other steps
// say why not and keep the closed form.
TEST_CASE("cli: the allocator simulation where a program applies") {
  SUBCASE("predict_simulated") {
    matches(succeeds(0, on_small("predict", {"--seq", "1024", "--lora-targets", "q_proj,k_proj,v_proj,o_proj"}))
                .out,
            {"allocator simulation of the recorded HF \\+ PEFT step \\([0-9]+ requests\\): peak [0-9.]+ [GM]B in the "
             "backward"});
  }
  SUBCASE("predict_text_is_the_json") {
    // The text's peak and required are the estimate's (the simulation's), as --json gives them,
    // not the closed form's that the breakdown table below them totals.
    const std::string text = succeeds(0, on_small("predict", {"--seq", "1024", "--lora-targets", "all-linear"})).out;
    nlohmann::json j =
        json_object(succeeds(0, on_small("predict", {"--seq", "1024", "--lora-targets", "all-linear", "--json"})));
    REQUIRE(j["method"] == "allocator simulation");
    REQUIRE(j["closed_form"]["peak_bytes"] != j["peak_bytes"]);
    holds(text, {fmt::format("peak:      {} allocated, in the backward (allocator simulation)",
                             vramfit::Bytes(j["peak_bytes"].get<std::uint64_t>())),
                 fmt::format("required:  {} with the allocator's margin",
                             vramfit::Bytes(j["required_bytes"].get<std::uint64_t>()))});
    CHECK(text.find(fmt::format("peak:      {}", vramfit::Bytes(j["closed_form"]["peak_bytes"].get<std::uint64_t>()))) ==
          std::string::npos);
  }
  SUBCASE("predict_simulated_json") {
    nlohmann::json j = json_object(
        succeeds(0, on_small("predict", {"--seq", "1024", "--lora-targets", "all-linear", "--json"})));
    CHECK(j["method"] == "allocator simulation");
    CHECK(j["simulation"]["available"] == true);
    CHECK(is_count(j["closed_form"]["peak_bytes"]));
  }
  SUBCASE("predict_full_simulated") {
    matches(succeeds(0, on_small("predict", {"--mode", "full", "--seq", "1024"})).out,
            {"allocator simulation of the recorded HF . PEFT step"});
  }
  SUBCASE("predict_batch_not_simulated") {
    holds(succeeds(0, on_small("predict", {"--mode", "full", "--seq", "1024", "--batch", "32"})).out,
          {"no allocator simulation: outside the range the programs are used in",
           "allocated, in the loss backward (closed form)"});
  }
  SUBCASE("predict_libtorch_json") {
    nlohmann::json j =
        json_object(succeeds(0, on_small("predict", {"--stack", "libtorch", "--json"})));
    CHECK(j["method"] == "allocator simulation");
    CHECK(j["simulation"]["available"] == true);
  }
  SUBCASE("predict_libtorch_fp32_closed_form") {
    holds(succeeds(0, on_small("predict", {"--stack", "libtorch", "--precision", "fp32", "--attention", "math"}))
              .out,
          {"no allocator simulation: recorded in bf16 only"});
  }
  SUBCASE("predict_outside_program_range") {
    holds(succeeds(0, on_small("predict", {"--seq", "100"})).out,
          {"no allocator simulation: outside the range the programs are used in"});
  }
}

TEST_CASE("cli: replay's file errors name its flag, not the library's field") {
  const auto error = [](const std::vector<std::string>& args) { return run_vramfit(args).err; };
  CHECK(error({"replay", "--data", "/nonexistent/steps.jsonl"}).starts_with("vramfit: error: --data: cannot open"));
  CHECK(error({"replay", "--trace", "/nonexistent/trace.jsonl"}).starts_with("vramfit: error: --trace: cannot open"));
  CHECK(error({"replay", "--trace", data_file("hf_steps.jsonl")})
            .starts_with("vramfit: error: --trace: 'hf_steps.jsonl' has no row of kind \"trace\""));
  CHECK(error({"replay", "--data", trace_file("libtorch_real_traces.jsonl.gz")})
            .starts_with("vramfit: error: --data: "));
  // A directory opens as a file on Linux and fails at the first read (EISDIR).
  const std::string data_dir = std::filesystem::path(data_file("hf_steps.jsonl")).parent_path().string();
  CHECK(error({"replay", "--trace", data_dir}) ==
        "vramfit: error: --trace: '" + data_dir + "' is a directory; give a JSON-lines file\n");
  CHECK(error({"replay", "--data", data_dir}) ==
        "vramfit: error: --data: '" + data_dir + "' is a directory; give a JSON-lines file\n");
}

TEST_CASE("cli: an endless input is refused, not read forever") {
  if (!std::filesystem::exists("/dev/zero")) return;  // Linux's endless file
  const auto error = [](const std::vector<std::string>& args) {
    const auto r = run_vramfit(args);
    CHECK(r.status == 2);
    return r.err;
  };
  CHECK(error({"predict", "--config", "/dev/zero"}) ==
        "vramfit: error: --config: '/dev/zero' is larger than 4 MiB: not a config.json (those are a few KB)\n");
  CHECK(error({"replay", "--data", "/dev/zero"}) ==
        "vramfit: error: zero:1: a line longer than 16 MiB: not a JSON-lines file vramfit reads\n");
  CHECK(error({"replay", "--trace", "/dev/zero"}) ==
        "vramfit: error: zero:1: a line longer than 16 MiB: not a JSON-lines file vramfit reads\n");
}

// Fit decisions under a budget (issue 13): the verdict of the simulated build and three steps,
// --alloc-conf and --gpu. The cases are measured trials (tests/data/trials_13.jsonl, trials 0-5).
TEST_CASE("cli: predict under a budget shows the reserved peak and the verdict") {
  const auto at = [](const std::string& batch, std::initializer_list<std::string> rest) {
    std::vector<std::string> args = on_small("predict", {"--lora-targets", "q_proj,k_proj,v_proj,o_proj", "--grad-ckpt",
                                                         "--seq", "4096", "--batch", batch, "--budget", "24GiB"});
    args.insert(args.end(), rest);
    return args;
  };
  SUBCASE("fits") {  // trial 1: batch 9 ran
    matches(succeeds(0, at("9", {})).out,
            {"fits the budget of 25.770 GB \\(24.00 GiB\\): no request runs out of memory; reserved peak [0-9.]+ GB "
             "\\(allocated peak [0-9.]+ GB\\), headroom"});
  }
  SUBCASE("out_of_memory") {  // trial 2: batch 10 ran out of memory in step 1's backward
    matches(succeeds(3, at("10", {})).out,
            {"does not fit the budget of 25.770 GB \\(24.00 GiB\\): OUT OF MEMORY in step 1's backward: tried to "
             "allocate [0-9.]+ [MG]B; [0-9.]+ GB allocated by PyTorch"});
    nlohmann::json j = json_object(succeeds(3, at("10", {"--json"})));
    CHECK(j["fits"] == false);
    CHECK(j["verdict"]["fits"] == false);
    CHECK(j["verdict"]["oom"]["step"] == 1);
    CHECK(j["verdict"]["oom"]["phase"] == "backward");
    CHECK(is_count(j["verdict"]["oom"]["tried_to_allocate_bytes"]));
    CHECK(j["verdict"]["oom"]["limit_bytes"] == 25769803776ULL);
  }
  SUBCASE("alloc_conf") {  // trials 4 and 5: with expandable segments batch 9 runs, 10 does not
    nlohmann::json j = json_object(succeeds(0, at("9", {"--alloc-conf", "expandable_segments:True", "--json"})));
    CHECK(j["verdict"]["fits"] == true);
    CHECK(j["alloc_conf"] == "expandable_segments:True");
    CHECK(j["verdict"]["reserved_peak_bytes"] <= 25769803776ULL + (20ULL << 20));
    (void)succeeds(3, at("10", {"--alloc-conf", "expandable_segments:True"}));
  }
  SUBCASE("gpu") {  // --gpu H200 is the card's allocator budget
    nlohmann::json j = json_object(succeeds(0, on_small("predict", {"--gpu", "H200", "--json"})));
    CHECK(j["budget_bytes"] == 150109880320ULL - 804061184ULL);  // gpus.hpp: H200 total less the driver's share
  }
}

TEST_CASE("cli: max-batch answers by the verdict and lists smaller batches that run out of memory") {
  nlohmann::json j = json_object(succeeds(0, on_small("max-batch", {"--lora-targets", "q_proj,k_proj,v_proj,o_proj",
                                                                    "--grad-ckpt", "--seq", "4096", "--budget", "24GiB",
                                                                    "--json"})));
  CHECK(j["max_batch"] == 9);  // trials 1 and 2: 9 ran, 10 ran out of memory
  REQUIRE(j["oom_below"].is_array());
  for (const auto& v : j["oom_below"]) CHECK(v < 9);
  CHECK(j["prediction"]["verdict"]["fits"] == true);
}

// Trials 17 to 20 of trials_13_libtorch_rerun.jsonl: batch 8 ran in a fresh process; at other
// segment placements the simulation runs out (estimate_test.cpp).
TEST_CASE("cli: a borderline batch is named as such by predict and max-batch") {
  const std::vector<std::string> step = {"--model", "Llama-3.2-1B", "--mode", "full", "--grad-ckpt", "--seq", "2048",
                                         "--stack", "libtorch", "--budget", "24GiB"};
  const auto with = [&](std::string command, std::initializer_list<std::string> rest) {
    std::vector<std::string> args{std::move(command)};
    args.insert(args.end(), step.begin(), step.end());
    args.insert(args.end(), rest);
    return args;
  };
  nlohmann::json j = json_object(succeeds(0, with("max-batch", {"--json"})));
  CHECK(j["max_batch"] == 7);
  CHECK(j["borderline_above"] == nlohmann::json::array({8}));
  holds(succeeds(0, with("max-batch", {})).out,
        {"max batch: 7", "reserved peak 23.163 GB under the budget (simulated; 22.928 GB in a fresh process)",
         "borderline: batch 8 runs in a fresh process"});
  j = json_object(succeeds(3, with("predict", {"--batch", "8", "--json"})));
  CHECK(j["fits"] == false);
  CHECK(j["verdict"]["fits_fresh_process"] == true);
  CHECK(j["verdict"]["reserved_peak_fresh_process_bytes"] == 25537019904ULL);
  holds(succeeds(3, with("predict", {"--batch", "8"})).out,
        {"at every segment placement (borderline)", "a fresh process runs it"});
  j = json_object(succeeds(3, with("predict", {"--batch", "9", "--json"})));
  CHECK(j["verdict"]["fits_fresh_process"] == false);
}

TEST_CASE("cli: --alloc-conf and --gpu refuse bad values, exit 2 naming the flag") {
  fails_naming("--alloc-conf", on_small("predict", {"--alloc-conf", "expandable_segment:True"}));
  fails_naming("--alloc-conf", on_small("max-batch", {"--alloc-conf", "roundup_power2_divisions:4", "--budget", "8GiB"}));
  fails_naming("--alloc-conf", on_small("sweep", {"--alloc-conf", "max_split_size_mb:10"}));
  fails_naming("--gpu", on_small("predict", {"--gpu", "H200", "--budget", "24GiB"}));
  fails_naming("--gpu", on_small("max-seq", {"--budget", "24GiB", "--gpu", "T4"}));
  const Ran r = run_vramfit(on_small("predict", {"--gpu", "RTX 5090"}));
  CHECK(r.status == 2);
  CHECK(r.err.find("--gpu: unknown card 'RTX 5090'; known: RTX-3050-Laptop-4GB, T4") != std::string::npos);
}
#endif  // VRAMFIT_HAS_CLI

TEST_CASE("cli: predict --varied-lengths and --lengths") {
  SUBCASE("predict.varied_lengths") {
    matches(succeeds(0, on_small("predict", {"--seq", "1024", "--varied-lengths"})).out,
            {"varied lengths up to 1024 in one process", "allocated peak at most [0-9.]+ GB over any lengths"});
  }
  SUBCASE("predict.varied_lengths.json") {
    nlohmann::json j = json_object(succeeds(0, on_small("predict", {"--seq", "1024", "--varied-lengths", "--json"})));
    const nlohmann::json& v = j["varied_lengths"];
    CHECK(is_count(v["peak_bytes"]));
    CHECK(v["peak_bytes"].get<std::uint64_t>() >= j["peak_bytes"].get<std::uint64_t>());
    CHECK(v["method"] == "allocator simulation");
    CHECK(v["lengths"].is_null());
    CHECK(v["simulated"].is_null());
  }
  SUBCASE("predict.lengths.json") {
    nlohmann::json j = json_object(
        succeeds(0, on_small("predict", {"--seq", "1024", "--lengths", "512,1024,768", "--budget", "24GiB", "--json"})));
    const nlohmann::json& v = j["varied_lengths"];
    CHECK(v["lengths"] == nlohmann::json({512, 1024, 768}));
    CHECK(is_count(v["simulated"]["peak_bytes"]));
    CHECK(is_count(v["simulated"]["reserved_peak_bytes"]));
    CHECK(v["simulated"]["peak_bytes"].get<std::uint64_t>() <= v["peak_bytes"].get<std::uint64_t>());
    CHECK(v["fits"] == true);
    CHECK(j["fits"] == true);
  }
  SUBCASE("predict.lengths.does_not_fit") {
    matches(succeeds(3, on_small("predict", {"--seq", "1024", "--lengths", "512,1024", "--budget", "1GiB"})).out,
            {"does not fit the budget of"});
  }
  SUBCASE("predict.lengths.bad") {
    fails_naming("--lengths", on_small("predict", {"--seq", "1024", "--lengths", "2048"}));
    fails_naming("--lengths", on_small("predict", {"--lengths", "0"}));
    fails_naming("--lengths", on_small("predict", {"--lengths", "512,,1024"}));
    fails_naming("--lengths", on_small("predict", {"--lengths", "x"}));
    std::string too_many = "1";  // VariedLengths::max_steps + 1 lengths
    for (std::size_t i = 0; i < vramfit::VariedLengths::max_steps; ++i) too_many += ",1";
    fails_naming("--lengths", on_small("predict", {"--seq", "1024", "--lengths", too_many}));
    fails_naming("--varied-lengths", on_small("predict", {"--varied-lengths=yes"}));
  }
}

// --programs: the step programs to simulate with, a file or a directory of STACK.programs; the
// answer names the file it used; a file of another stack is not used, and a warning says so.
TEST_CASE("cli: --programs FILE|DIR") {
  const std::string dir = data_file("programs");
  const std::string file = dir + "/hf-peft.programs";
  const Ran own = succeeds(0, on_small("predict", {"--seq", "1024", "--programs", file}));
  holds(own.out, {"step programs: " + file + "\n"});
  const Ran builtin = succeeds(0, on_small("predict", {"--seq", "1024"}));
  holds(builtin.out, {"step programs: " + vramfit::builtin_programs("hf-peft").set->source + "\n"});
  const nlohmann::json j = json_object(succeeds(0, on_small("predict", {"--seq", "1024", "--programs", dir, "--stack",
                                                                          "libtorch", "--json"})));
  CHECK(j["provenance"]["programs"] == dir + "/libtorch.programs");
  CHECK(j["method"] == "allocator simulation");
  CHECK(json_object(succeeds(0, on_small("predict", {"--seq", "100", "--json"})))["provenance"]["programs"].is_null());

  SUBCASE("a file of another stack: a warning, and the built-in programs") {
    const Ran r = run_vramfit(on_small("max-batch", {"--seq", "1024", "--budget", "8GB", "--programs",
                                                     dir + "/libtorch.programs"}));
    CHECK(r.status == 0);
    CHECK(r.err == "vramfit: warning: --programs: " + dir +
                       "/libtorch.programs holds step programs of libtorch, not of --stack hf-peft; they are not used\n");
  }
  SUBCASE("bad input names --programs") {
    fails_naming("--programs", on_small("predict", {"--programs", "/nonexistent.programs"}));
    fails_naming("--programs", on_small("predict", {"--programs", data_file("configs")}));  // no hf-peft.programs
    fails_naming("--programs", on_small("predict", {"--programs", data_file("configs/SmolLM2-135M.json")}));
    const Ran r = run_vramfit(on_small("predict", {"--programs", data_file("configs/SmolLM2-135M.json")}));
    CHECK(r.err.find("vramfit: error: --programs: " + data_file("configs/SmolLM2-135M.json") +
                     ":1: must begin with 'vramfit-programs 3'") == 0);
  }
}

// replay --programs: the measured steps predicted with a program file (the built-in one copied
// gives the built-in figures; the JSON names the file).
TEST_CASE("cli: replay --programs") {
  const std::string file = data_file("programs/hf-peft.programs");
  const Ran own = succeeds(0, {"replay", "--data", data_file("hf_steps.jsonl"), "--programs", file, "--json"});
  const Ran builtin = succeeds(0, {"replay", "--data", data_file("hf_steps.jsonl"), "--json"});
  const std::vector<nlohmann::json> a = json_lines(own), b = json_lines(builtin);
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  std::size_t simulated = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    CHECK(a[k]["predicted_bytes"] == b[k]["predicted_bytes"]);
    if (a[k]["method"] == "allocator simulation") {
      ++simulated;
      CHECK(a[k]["programs"] == file);
    }
  }
  CHECK(simulated > 0);
  fails_naming("--programs", {"replay", "--data", data_file("hf_steps.jsonl"), "--programs",
                              data_file("programs/libtorch.programs")});
  fails_naming("--programs", {"replay", "--trace", data_file("traces/smollm2-135m-full-s1024.jsonl"), "--programs",
                              file});
}
