// parse_size on arbitrary text: a size, or InvalidInput naming the field it was given.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "vramfit/bytes.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vramfit::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto b = vramfit::fuzz::attempt([&] { return vramfit::parse_size(text, "--budget"); }, "--budget");
  if (!b) return 0;
  // The count written back in bytes reads as itself with the unit B; without a unit (a number of
  // bytes is never assumed) it is refused.
  const std::string plain = std::to_string(b->count());
  check(!vramfit::fuzz::attempt([&] { return vramfit::parse_size(plain, "--budget"); }, "--budget"),
        "parse_size(to_string(parse_size(s).count())) accepted a size without a unit");
  check(vramfit::fuzz::must_succeed([&] { return vramfit::parse_size(plain + " B"); }, "parse_size(count B)") == *b,
        "parse_size(count + \" B\") != parse_size(s)");
  check(vramfit::fuzz::must_succeed([&] { return vramfit::parse_size(plain + "B"); }, "parse_size(countB)") == *b,
        "parse_size(count + \"B\") != parse_size(s)");
  return 0;
}
