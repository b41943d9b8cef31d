// The measurements reader (replay.hpp): which rows it takes, and bad rows named by line and field.
// The rows here are format fixtures written for this test, not measurements.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support.hpp"

#include "vramfit/detail/replay.hpp"

using namespace vramfit;
using namespace vramfit::detail;

namespace {
const std::string shape = R"("shape": {"vocab": 1000, "hidden": 64, "intermediate": 160, "layers": 2, "heads": 4,
  "kv_heads": 2, "head_dim": 16, "tied_embeddings": true, "qkv_bias": false})";

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}
std::string step_row(const std::string& extra) {
  return one_line(R"({"kind": "step", "model": "tiny", )" + shape +
                  R"(, "mode": "lora", "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"], "batch": 2, "seq": 128)" +
                  extra + "}");
}
Measurements parse(const std::string& text) {
  std::istringstream in(text);
  return parse_measurements(in, "fixture.jsonl", "hf-peft");
}
}  // namespace

TEST_CASE("steps, max-batch rows, and skipped rows") {
  const std::string text =
      R"({"kind": "stack", "gpu": "x"})" "\n" +
      step_row(R"(, "realised_seq": 128, "peak_first": 1000, "peak_steady": 1200, "gradient_checkpointing": true)") + "\n\n" +
      step_row(R"(, "realised_seq": 128, "error": "OOM: tried to allocate 2 GiB")") + "\n" +
      one_line(R"({"kind": "max_batch", "model": "tiny", )" + shape +
               R"(, "mode": "full", "seq": 256, "cap_bytes": 5000000, "max_batch": 7})") + "\n";
  const Measurements m = parse(text);
  REQUIRE(m.steps.size() == 1);
  CHECK(m.skipped == 2);  // the stack row and the failed step
  const MeasuredStep& s = m.steps.front();
  CHECK(s.model == "tiny");
  CHECK(s.stack == "hf-peft");
  CHECK(s.shape.kv_heads == 2);
  CHECK(s.shape.tied_embeddings);
  CHECK(s.step.batch == 2);
  CHECK(s.step.seq == 128);
  CHECK(s.step.lora.targets == TargetSet::peft_default());
  CHECK(s.step.gradient_checkpointing);
  CHECK_FALSE(s.step.logits_retained);
  CHECK(s.real(PeakOver::first_step) == Bytes(1000));
  CHECK(s.real(PeakOver::steady) == Bytes(1200));
  CHECK(s.line == 2);
  REQUIRE(m.max_batches.size() == 1);
  CHECK(m.max_batches.front().step.mode == Mode::full);
  CHECK(m.max_batches.front().cap == Bytes(5000000));
  CHECK(m.max_batches.front().max_batch == 7);
}

TEST_CASE("a row's own stack_profile wins over the default") {
  const Measurements m =
      parse(step_row(R"(, "stack_profile": "libtorch", "realised_seq": 128, "peak_first": 1, "peak_steady": 1)"));
  REQUIRE(m.steps.size() == 1);
  CHECK(m.steps.front().stack == "libtorch");
}

TEST_CASE("bad rows are errors naming the line and the field") {
  const auto error_of = [](const std::string& text) {
    try {
      (void)parse(text);
    } catch (const InvalidInput& e) {
      return e.field();
    }
    return std::string("no error");
  };
  CHECK(error_of("not json") == "fixture.jsonl:1");
  CHECK(error_of("[1, 2]") == "fixture.jsonl:1");
  CHECK(error_of(step_row(R"(, "realised_seq": 128, "peak_first": 1)")) == "fixture.jsonl:1: peak_steady");
  CHECK(error_of(step_row(R"(, "realised_seq": 100, "peak_first": 1, "peak_steady": 1)")) ==
        "fixture.jsonl:1: realised_seq");
  CHECK(error_of(step_row(R"(, "realised_seq": 128, "peak_first": -5, "peak_steady": 1)")) ==
        "fixture.jsonl:1: peak_first");
  CHECK(error_of(step_row(R"(, "realised_seq": 128, "peak_first": 1.5, "peak_steady": 1)")) ==
        "fixture.jsonl:1: peak_first");
  CHECK(error_of(R"({"kind": "step", "model": "x"})") == "fixture.jsonl:1: shape");
  // The step's fields in the schema of json.hpp, named with the line.
  const std::string measured = R"(, "realised_seq": 128, "peak_first": 1, "peak_steady": 1)";
  std::string old_targets = step_row(measured);
  old_targets.replace(old_targets.find(R"(["q_proj", "v_proj"])"), 20, R"("q_proj,v_proj")");
  CHECK(error_of(old_targets) == "fixture.jsonl:1: lora_targets");
  CHECK(error_of(step_row(measured + R"(, "sharding": "hybrid")")) == "fixture.jsonl:1: sharding");
  CHECK(error_of("\n" + step_row(measured + R"(, "attention": "fast")")) == "fixture.jsonl:2: attention");
  std::string no_vocab = step_row(measured);
  no_vocab.erase(no_vocab.find(R"("vocab": 1000, )"), 15);
  CHECK(error_of(no_vocab) == "fixture.jsonl:1: shape: vocab");
  // Found by tests/fuzz: nlohmann's out_of_range and type_error escaped these, and a shape that
  // failed `validate` named no line.
  CHECK(error_of(R"({"kind": "step", "batch": 1e400})") == "fixture.jsonl:1");
  CHECK(error_of(R"({"kind": 7})") == "fixture.jsonl:1: kind");
  CHECK(error_of(step_row(R"(, "stack_profile": 3)")) == "fixture.jsonl:1: stack_profile");
  CHECK(error_of(R"({"kind": "step", "model": ["x"]})") == "fixture.jsonl:1: model");
  CHECK(error_of(one_line(R"({"kind": "step", )" + shape + R"(, "mode": 1, "batch": 1, "seq": 8})")) ==
        "fixture.jsonl:1: mode");
  CHECK(error_of(one_line(R"({"kind": "step", "shape": {"vocab": 100, "hidden": 64, "intermediate": 128,
                     "layers": 2, "heads": 4, "kv_heads": 3}, "mode": "full", "batch": 1, "seq": 8})")) ==
        "fixture.jsonl:1: shape: kv_heads");
}

TEST_CASE("attention \"sdpa\" (HF's attn_implementation) reads as the default kernel") {
  const Measurements m =
      parse(step_row(R"(, "attention": "sdpa", "realised_seq": 128, "peak_first": 1, "peak_steady": 1)"));
  REQUIRE(m.steps.size() == 1);
  CHECK(m.steps.front().step.attention == Step{}.attention);
}

TEST_CASE("a missing file is an error, not an empty set") {
  CHECK_THROWS_AS((void)load_measurements("/nonexistent/measurements.jsonl", "hf-peft"), InvalidInput);
}

// `replay --trace FILE.jsonl.gz` failed with "not JSON ... '<U+001F>'": a gzip file (magic bytes
// 1f 8b) is named as such, with what to do.
TEST_CASE("a gzip-compressed measurements or trace file is refused: gunzip it first") {
  const std::string path = (std::filesystem::temp_directory_path() / "vramfit-compressed.jsonl.gz").string();
  // The start of `echo '{}' | gzip`: magic, deflate, flags, mtime...
  std::ofstream(path, std::ios::binary) << std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\xae\xe5\x02\x00", 15);
  const auto message = [](auto load) -> std::string {
    try {
      load();
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "<no error>";
  };
  const std::string trace = message([&] { (void)load_trace(path); });
  CHECK(trace.rfind("trace: '" + path + "' is gzip-compressed: gunzip it first", 0) == 0);
  const std::string rows = message([&] { (void)load_measurements(path, "hf-peft"); });
  CHECK(rows.rfind("measurements: '" + path + "' is gzip-compressed: gunzip it first", 0) == 0);
  CHECK(test::field_of([&] { (void)load_trace(path); }) == "trace");

  // A one-byte file that starts like gzip is read as text (and is no trace).
  const std::string short_path = (std::filesystem::temp_directory_path() / "vramfit-one-byte.jsonl").string();
  std::ofstream(short_path, std::ios::binary) << '\x1f';
  CHECK(message([&] { (void)load_trace(short_path); }).find("gzip") == std::string::npos);
}

// read_line reads through the stream buffer: an error the buffer throws (libstdc++'s filebuf on a
// read that fails, as on a directory) is an InvalidInput naming the line, not an escaping
// std::ios_base::failure (exit 1). The buffer here stands in for such a file.
TEST_CASE("a read error is bad input naming the line; a line over the bound is refused") {
  struct FailingBuffer : std::streambuf {
    int_type underflow() override { throw std::ios_base::failure("read failed"); }
  };
  FailingBuffer failing;
  std::istream broken(&failing);
  std::string text;
  CHECK(test::field_of([&] { (void)read_line(broken, text, "rows.jsonl", 1); }) == "rows.jsonl:1");
  CHECK(broken.bad());

  std::istringstream two("a\nb");
  CHECK(read_line(two, text, "two", 1));
  CHECK(text == "a");
  CHECK(read_line(two, text, "two", 2));
  CHECK(text == "b");
  CHECK(!read_line(two, text, "two", 3));

  std::istringstream endless(std::string(max_line_bytes + 1, 'x'));
  CHECK(test::field_of([&] { (void)read_line(endless, text, "long", 1); }) == "long:1");
}
