// detail::parse_measurements on arbitrary JSON lines: rows whose shapes validate, or
// InvalidInput naming the file and line (or Overflow).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "vramfit/detail/replay.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vramfit::fuzz::check;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  // Every error names the file and line ("fuzz.jsonl:3: shape: kv_heads").
  const auto r = vramfit::fuzz::attempt(
      [&] { return vramfit::detail::parse_measurements(in, "fuzz.jsonl", "hf-peft"); }, "fuzz.jsonl:");
  if (!r) return 0;
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  lines += 1;
  check(r->steps.size() + r->max_batches.size() + r->skipped <= lines, "more rows than lines");
  std::size_t last = 0;
  for (const auto& s : r->steps) {
    vramfit::fuzz::must_succeed([&] { vramfit::validate(s.shape); return 0; }, "validate(a measured step's shape)");
    check(s.realised_seq == s.step.seq, "a step row's realised_seq is its seq");
    check(s.line > last && s.line <= lines, "step rows in line order");
    last = s.line;
  }
  last = 0;
  for (const auto& m : r->max_batches) {
    vramfit::fuzz::must_succeed([&] { vramfit::validate(m.shape); return 0; }, "validate(a max-batch row's shape)");
    check(m.line > last && m.line <= lines, "max-batch rows in line order");
    last = m.line;
  }
  return 0;
}
