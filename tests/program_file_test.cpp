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
/// A minimal file: one section, one (invalid as a step) program; `lines` replaces the body.
std::string small_file(std::string_view body) {
  return "vramfit-programs 1\nstack hf-peft\ngpu G\nsoftware S\n" + std::string(body);
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
  CHECK(error_of("") == "f.programs:1: the file ends early: expected the header 'vramfit-programs 1'");
  CHECK(error_of("{\"kind\": \"trace\"}\n").find("f.programs:1: must begin with 'vramfit-programs 1'") == 0);
  CHECK(error_of("vramfit-programs 2\n") == "f.programs:1: version 2 is not supported (this vramfit reads version 1)");
  CHECK(error_of("# comment\nvramfit-programs 1\nstack tensorflow\n").find("f.programs:3: stack must be hf-peft or "
                                                                          "libtorch") == 0);
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

TEST_CASE("program file: load_programs names an unreadable path under its field") {
  CHECK_THROWS_WITH_AS(load_programs("/nonexistent/x.programs"),
                       "--programs: cannot read '/nonexistent/x.programs': No such file or directory", InvalidInput);
  CHECK_THROWS_WITH_AS(load_programs(VRAMFIT_TEST_DATA_DIR, "programs"), doctest::Contains("Is a directory"),
                       InvalidInput);
}
