// parse_programs on arbitrary text, then each program it reads run at a small shape through the
// allocator model: a file is a user's input (`--programs`), so a damaged or hostile one must give
// InvalidInput (or Overflow), never a crash, and a run's peak over two steps is at least its first's.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vramfit/program_file.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vramfit::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto set = vramfit::fuzz::attempt([&] { return vramfit::parse_programs(text, "fuzz.programs"); });
  if (!set) return 0;
  const vramfit::ProgramSet& s = **set;
  check(s.parsed.size() == s.entries.size(), "every entry parsed");
  check(s.stack == "hf-peft" || s.stack == "libtorch", "a known stack");
  // Small dimensions keep each run short; 4 and 5 layers exercise the layer repeats.
  const vramfit::detail::ProgramDims dims{.batch = 1, .seq = 256, .hidden = 64, .intermediate = 128, .heads = 2,
                                          .kv_heads = 1, .head_dim = 32, .vocab = 1000, .rank = 4};
  for (const vramfit::detail::StepProgram& program : s.parsed)
    for (const std::uint64_t layers : {4u, 5u}) {
      const auto peaks = vramfit::fuzz::attempt([&] { return program.run(dims, layers, vramfit::Bytes{}, false); });
      if (peaks) check(peaks->first <= peaks->steady, "the peak over steps 1 and 2 is at least step 1's");
    }
  return 0;
}
