// parse_alloc_conf on arbitrary text: settings that read back as themselves, or InvalidInput
// naming --alloc-conf. Accepted settings hold PyTorch's ranges.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "vramfit/alloc_conf.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vramfit::fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto c = vramfit::fuzz::attempt([&] { return vramfit::parse_alloc_conf(text); }, "--alloc-conf");
  if (!c) return 0;
  check(!c->max_split_size || *c->max_split_size > (20ULL << 20), "max_split_size_mb above 20");
  check(!c->garbage_collection_threshold ||
            (*c->garbage_collection_threshold > 0.0 && *c->garbage_collection_threshold < 1.0),
        "garbage_collection_threshold in (0, 1)");
  const std::string back = vramfit::to_string(*c);
  const auto again = vramfit::fuzz::must_succeed([&] { return vramfit::parse_alloc_conf(back); }, "parse_alloc_conf(to_string)");
  check(again == *c,
        "parse_alloc_conf(to_string(c)) keeps the settings");
  return 0;
}
