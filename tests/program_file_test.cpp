// Step programs as data (program_file.hpp): the built-in files read back, a file given in the
// RunContext simulates as the built-in one does, and every damage to a file is an error naming
// the file and line.

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

#include "vramfit/estimate.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/program_file.hpp"

using namespace vramfit;

namespace {
std::string builtin_text(const std::string& stack) {
  std::ifstream in(std::string(VRAMFIT_TEST_DATA_DIR) + "/programs/" + stack + ".programs", std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
/// A minimal file's header (format `version`) and `body`.
std::string small_file(std::string_view body, int version = 1) {
  return "vramfit-programs " + std::to_string(version) + "\nstack hf-peft\ngpu G\nsoftware S\n" + std::string(body);
}
/// `text` with every occurrence of `from` replaced by `to`.
std::string replaced(std::string text, std::string_view from, std::string_view to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}
/// The error `parse_programs` gives for `text`, or "" when it reads it.
std::string error_of(const std::string& text) {
  try {
    (void)parse_programs(text, "f.programs");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("program file: the built-in files hold every recorded kind, with their stack record") {
  for (const std::string stack : {"hf-peft", "libtorch"}) {
    CAPTURE(stack);
    const BuiltinPrograms& builtin = builtin_programs(stack);
    REQUIRE(builtin.set != nullptr);
    CHECK(builtin.why.empty());
    CHECK(builtin.set->stack == stack);
    CHECK(builtin.set->gpu == "NVIDIA H200");
    CHECK(builtin.set->entries.size() == 48);  // 2 architectures x 2 heads x 12 kinds of step
    CHECK(builtin.set->parsed.size() == builtin.set->entries.size());
    // Shared sections: the file is far smaller than its programs written out.
    std::size_t ints = 0;
    for (const ProgramEntry& e : builtin.set->entries) ints += e.program.size();
    CHECK(builtin_text(stack).size() < ints * 2);
  }
  CHECK(builtin_programs("hf-peft").set->software.starts_with("torch 2.11.0"));
}

TEST_CASE("program file: programs given in the RunContext simulate as the built-in ones do") {
  const ModelShape m = *find_preset("Qwen2.5-0.5B");
  const Step s{.batch = 2, .seq = 1024, .gradient_checkpointing = true};
  RunContext c;
  c.programs = parse_programs(builtin_text("hf-peft"), "copy.programs");
  const Estimate own = estimate(m, s, Stack::hf_peft, c);
  const Estimate builtin = estimate(m, s);
  REQUIRE(own.simulation);
  CHECK(own.peak == builtin.peak);
  CHECK(own.simulation->reserved == builtin.simulation->reserved);
  CHECK(own.provenance.programs == "copy.programs");
  // Programs of another stack are refused, naming them.
  c.programs = parse_programs(builtin_text("libtorch"), "lt.programs");
  CHECK_THROWS_WITH_AS(estimate(m, s, Stack::hf_peft, c), doctest::Contains("lt.programs holds step programs of libtorch"),
                       InvalidInput);
  // A file without the step's kind: the closed form, saying why.
  const std::string text = builtin_text("hf-peft");
  const std::size_t first_program = text.find("\np ");
  const std::size_t end = text.find("\nend");
  const std::string none = text.substr(0, text.find("\nprograms ")) + "\nprograms 0" + text.substr(end);
  REQUIRE(first_program < end);
  c.programs = parse_programs(none, "none.programs");
  const Estimate closed = estimate(m, s, Stack::hf_peft, c);
  CHECK(closed.method == Method::closed_form);
  CHECK(closed.no_simulation.find("was not recorded") != std::string_view::npos);
}

TEST_CASE("program file: damage is an error naming the file and line") {
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 3 full - 0 0 : 5\nend\n"))
            .find("f.programs:7: the program is not a valid step program") == 0);
  CHECK(error_of("") == "f.programs:1: the file ends early: expected the header 'vramfit-programs 3'");
  CHECK(error_of("{\"kind\": \"trace\"}\n").find("f.programs:1: must begin with 'vramfit-programs 3'") == 0);
  CHECK(error_of("vramfit-programs 4\n") == "f.programs:1: version 4 is not supported (this vramfit reads versions 1 to 3)");
  CHECK(error_of("vramfit-programs 0\n") == "f.programs:1: version 0 is not supported (this vramfit reads versions 1 to 3)");
  CHECK(error_of("# comment\nvramfit-programs 1\nstack tensorflow\n").find("f.programs:3: stack must be hf-peft, "
                                                                          "hf-trainer or libtorch") == 0);
  CHECK(error_of(small_file("sections 99999999\n")).find("f.programs:5: sections must be at most 65536") == 0);
  CHECK(error_of(small_file("sections 1\ns 1 x\n")) == "f.programs:6: 'x' is not a 32-bit integer");
  CHECK(error_of(small_file("sections 1\ns 1 4294967296\n")) == "f.programs:6: '4294967296' is not a 32-bit integer");
  CHECK(error_of(small_file("sections 1\ns 1  2\n")) == "f.programs:6: fields must be separated by single spaces");
  CHECK(error_of(small_file("sections 1\ns 0\nprograms 1\np llama 0 3 full - 0 0 : #1\nend\n")) ==
        "f.programs:8: section #1 does not exist (1 sections)");
  CHECK(error_of(small_file("sections 0\nprograms 1\np gemma 0 3 full - 0 0 : 0\nend\n"))
            .find("f.programs:7: the architecture must be llama or qwen2") == 0);
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 2 3 full - 0 0 : 0\nend\n")) ==
        "f.programs:7: tied must be 0 or 1, got '2'");
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 3 lora - 0 0 : 0\nend\n"))
            .find("f.programs:7: targets must be '-' for full fine-tuning and only then") == 0);
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 0 full - 0 0 : 0\nend\n"))
            .find("f.programs:7: head_dims must name a head_dim") == 0);
  // A section referenced over and over: refused once the programs pass 2^24 integers in all.
  std::string big = "sections 1\ns";
  for (int k = 0; k < 4096; ++k) big += " 1";
  big += "\nprograms 2\np llama 0 3 full - 0 0 :";
  for (int k = 0; k < 3000; ++k) big += " #0";
  big += "\np llama 0 3 full - 0 0 :";
  for (int k = 0; k < 2000; ++k) big += " #0";
  CHECK(error_of(small_file(big + "\nend\n")) ==
        "f.programs:9: the programs are longer than 16777216 integers in all");
  // Truncated: the programs announced are not all there, or 'end' is missing.
  CHECK(error_of(small_file("sections 0\nprograms 2\np llama 0 3 full - 0 0 : 0\n")) ==
        "f.programs:8: the file ends early: expected a program line 'p ...'");
  CHECK(error_of(small_file("sections 0\nprograms 0\n")) == "f.programs:7: the file ends early: expected 'end'");
  CHECK(error_of(small_file("sections 0\nprograms 0\nend\nmore\n")) ==
        "f.programs:8: follows 'end': nothing may come after it");
  // The built-in file with its first program's last item dropped: a program that ends early.
  std::string text = builtin_text("libtorch");
  const std::size_t line_end = text.find('\n', text.find("\np ") + 1);
  text.erase(text.rfind(' ', line_end), line_end - text.rfind(' ', line_end));
  CHECK(error_of(text).find("the program is not a valid step program") != std::string::npos);
}

TEST_CASE("program file: version 2 names each program's optimizer and LoRA dropout; version 1 ran AdamW without") {
  const auto one = [](std::string_view line, int version) {
    return parse_programs(small_file("sections 0\nprograms 1\n" + std::string(line) + " : 0\nend\n", version), "f")
        ->entries.at(0);
  };
  // (Each program here is one integer: no valid step program, so only the fields are checked.)
  const auto fields = [&](std::string_view line, int version) {
    try {
      const ProgramEntry e = one(line, version);
      return std::string(to_string(e.optimizer)) + (e.dropout ? " dropout" : "");
    } catch (const InvalidInput& e) {
      const std::string what = e.what();
      return what.find("not a valid step program") != std::string::npos ? std::string("fields read") : what;
    }
  };
  CHECK(fields("p llama 0 3 full - 0 0", 1) == "fields read");
  CHECK(fields("p llama 0 3 full - 0 0 sgd 0", 2) == "fields read");
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 3 full - 0 0 : 0\nend\n", 2)) ==
        "f.programs:7: the optimizer must be one of vramfit's --optim names (adamw, adamw-fused, adafactor, "
        "sgd-momentum, sgd), got ':'");  // a version 1 line
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 3 full - 0 0 adam 0 : 0\nend\n", 2)) ==
        "f.programs:7: the optimizer must be one of vramfit's --optim names (adamw, adamw-fused, adafactor, "
        "sgd-momentum, sgd), got 'adam'");
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 3 lora all-linear 0 0 sgd 2 : 0\nend\n", 2)) ==
        "f.programs:7: dropout must be 0 or 1, got '2'");
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 3 full - 0 0 adamw 1 : 0\nend\n", 2)) ==
        "f.programs:7: dropout must be 0 for full fine-tuning (it is LoRA's)");
  // A version 1 line read as version 2 lacks the fields; a version 2 line read as version 1 has two too many.
  CHECK(error_of(small_file("sections 0\nprograms 1\np llama 0 3 full - 0 0 adamw 0 : 0\nend\n", 1)) ==
        "f.programs:7: the program's items must follow ' : '");

  // Which entry a step takes: the built-in programs relabelled as another optimizer's or as run
  // with dropout apply to steps of that kind only (the same programs: the same simulated peak).
  const ModelShape m = *find_preset("Qwen2.5-0.5B");
  const Step adamw{.batch = 2, .seq = 1024, .lora = {.rank = 32}};
  Step sgd = adamw;
  sgd.optimizer = Optimizer::sgd_momentum;
  Step dropout = adamw;
  dropout.lora.dropout = 0.05;
  const std::string text = builtin_text("hf-peft");
  REQUIRE(text.find(" adamw 0 :") != std::string::npos);
  RunContext as_sgd, as_dropout;
  as_sgd.programs = parse_programs(replaced(text, " adamw 0 :", " sgd-momentum 0 :"), "sgd.programs");
  std::string with_dropout_text = replaced(text, " adamw 0 :", " adamw 1 :");
  for (const char* full_kind : {"full - 0 0", "full - 0 1", "full - 1 0", "full - 1 1"})  // full has no dropout
    with_dropout_text = replaced(with_dropout_text, std::string(full_kind) + " adamw 1 :", std::string(full_kind) + " adamw 0 :");
  as_dropout.programs = parse_programs(with_dropout_text, "dropout.programs");
  const Estimate builtin = estimate(m, adamw);
  REQUIRE(builtin.simulation);
  const Estimate with_sgd = estimate(m, sgd, Stack::hf_peft, as_sgd);
  REQUIRE(with_sgd.simulation);
  CHECK(with_sgd.peak == builtin.peak);
  CHECK(with_sgd.provenance.programs == "sgd.programs");
  CHECK(estimate(m, adamw, Stack::hf_peft, as_sgd).method == Method::closed_form);
  const Estimate with_dropout = estimate(m, dropout, Stack::hf_peft, as_dropout);
  REQUIRE(with_dropout.simulation);
  CHECK(with_dropout.peak == builtin.peak);
  CHECK(estimate(m, adamw, Stack::hf_peft, as_dropout).method == Method::closed_form);
  // The built-in programs ran AdamW without dropout: SGD and dropout steps get the closed form, saying why.
  for (const Step& s : {sgd, dropout}) {
    const Estimate e = estimate(m, s);
    CHECK(e.method == Method::closed_form);
    CHECK(e.no_simulation.find("optimizer, LoRA dropout, weights) was not recorded") != std::string_view::npos);
  }
}

TEST_CASE("program file: version 3 names each program's weights; hf-trainer takes programs of its weights") {
  const auto weights_of = [](std::string_view fields) {
    const std::string text = "vramfit-programs 3\nstack hf-trainer\ngpu G\nsoftware S\nsections 0\nprograms 1\n" +
                             std::string(fields) + " : 0\nend\n";
    try {
      (void)parse_programs(text, "f.programs");
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("read");
  };
  // (One integer is no valid step program: an error after the fields were read.)
  CHECK(weights_of("p llama 0 3 full - 0 0 adamw-fused 0 fp32").find("not a valid step program") != std::string::npos);
  CHECK(weights_of("p llama 0 3 full - 0 0 adamw-fused 0 fp16") ==
        "f.programs:7: the weights must be bf16 or fp32, got 'fp16'");
  CHECK(weights_of("p llama 0 3 full - 0 0 adamw-fused 0") == "f.programs:7: the weights must be bf16 or fp32, got ':'");
  CHECK(error_of("vramfit-programs 2\nstack hf-trainer\n") ==
        "f.programs:2: the Trainer's programs name their weights: stack hf-trainer needs version 3, got version 2");

  // The built-in hf-peft programs relabelled as the Trainer's, with fp32 weights: an hf-trainer step
  // with fp32 weights under bf16 autocast takes them, one with bf16 weights does not, and neither
  // does a step with accumulation (recorded with accumulation 1 only).
  std::string text = builtin_text("hf-peft");
  text = replaced(text, "vramfit-programs 2\nstack hf-peft", "vramfit-programs 3\nstack hf-trainer");
  text = replaced(replaced(text, " adamw 0 :", " adamw-fused 0 fp32 :"), " adamw 1 :", " adamw-fused 1 fp32 :");
  RunContext c;
  c.programs = parse_programs(text, "trainer.programs");
  REQUIRE(c.programs->stack == "hf-trainer");
  const ModelShape m = *find_preset("Qwen2.5-0.5B");
  Step mixed{.batch = 2, .seq = 1024, .lora = {.rank = 32}, .optimizer = Optimizer::adamw_fused};
  mixed.weights = Precision::fp32;
  const Estimate e = estimate(m, mixed, Stack::hf_trainer, c);
  REQUIRE(e.simulation);
  CHECK(e.provenance.programs == "trainer.programs");
  Step bf16_weights = mixed;
  bf16_weights.weights = Precision::bf16;
  CHECK(estimate(m, bf16_weights, Stack::hf_trainer, c).method == Method::closed_form);
  Step accumulating = mixed;
  accumulating.grad_accum = 2;
  const Estimate acc = estimate(m, accumulating, Stack::hf_trainer, c);
  CHECK(acc.method == Method::closed_form);
  CHECK(acc.no_simulation == "recorded with gradient accumulation 1 only");
  // The programs of one stack serve no other.
  CHECK_THROWS_WITH_AS(estimate(m, bf16_weights, Stack::hf_peft, c), doctest::Contains("holds step programs of hf-trainer"),
                       InvalidInput);
}

TEST_CASE("program file: load_programs names an unreadable path under its field") {
  CHECK_THROWS_WITH_AS(load_programs("/nonexistent/x.programs"),
                       "--programs: cannot read '/nonexistent/x.programs': No such file or directory", InvalidInput);
  CHECK_THROWS_WITH_AS(load_programs(VRAMFIT_TEST_DATA_DIR, "programs"), doctest::Contains("Is a directory"),
                       InvalidInput);
}
