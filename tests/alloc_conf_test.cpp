// PYTORCH_CUDA_ALLOC_CONF parsing (vramfit/alloc_conf.hpp): PyTorch's own syntax and ranges
// (c10's CUDAAllocatorConfig::parseArgs); keys the model does not follow are refused by name.
#include <doctest/doctest.h>

#include <string>

#include "vramfit/alloc_conf.hpp"

using vramfit::AllocConf;
using vramfit::parse_alloc_conf;

namespace {
// The message of the InvalidInput `text` raises (it must name --alloc-conf), or "" if accepted.
std::string refusal(const std::string& text) {
  try {
    (void)parse_alloc_conf(text);
  } catch (const vramfit::InvalidInput& e) {
    CHECK(e.field() == "--alloc-conf");
    return e.what();
  }
  return "";
}
bool says(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("alloc conf: the keys the model follows, in PyTorch's syntax") {
  CHECK(parse_alloc_conf("") == AllocConf{});
  CHECK(parse_alloc_conf("expandable_segments:True").expandable_segments);
  CHECK_FALSE(parse_alloc_conf("expandable_segments:False").expandable_segments);
  const AllocConf c = parse_alloc_conf("expandable_segments:True,max_split_size_mb:512,garbage_collection_threshold:0.8");
  CHECK(c.expandable_segments);
  CHECK(c.max_split_size == (512ULL << 20));
  CHECK(c.garbage_collection_threshold == doctest::Approx(0.8));
  CHECK(parse_alloc_conf(" max_split_size_mb : 21 , expandable_segments:True ").max_split_size == (21ULL << 20));
  // Written back, it reads as itself.
  CHECK(parse_alloc_conf(vramfit::to_string(c)) == c);
  CHECK(vramfit::to_string(parse_alloc_conf("garbage_collection_threshold:0.0000001")) ==
        "garbage_collection_threshold:0.0000001");
  // Settings without effect on device memory are accepted.
  CHECK(parse_alloc_conf("backend:native,release_lock_on_cudamalloc:True") == AllocConf{});
}

TEST_CASE("memory_fraction_limit is c10's allowed_memory_maximum: static_cast<size_t>(fraction * total)") {
  // The harness's 4 GiB trial on the H200: fraction 4 GiB / total gives 4 GiB back, to the byte.
  CHECK(vramfit::memory_fraction_limit(150109880320ULL, 4294967296.0 / 150109880320.0) == 4294967296ULL);
  CHECK(vramfit::memory_fraction_limit(1000, 0.3333) == 333);  // truncated, not rounded
  CHECK_THROWS_AS((void)vramfit::memory_fraction_limit(1000, 1.5), vramfit::InvalidInput);
  CHECK_THROWS_AS((void)vramfit::memory_fraction_limit(1000, -0.1), vramfit::InvalidInput);
}

TEST_CASE("alloc conf: an unknown key, a bad value or an unmodelled key is refused by name") {
  CHECK(says(refusal("expandable_segment:True"), "expandable_segment: unknown key; allowed: expandable_segments"));
  CHECK(says(refusal("expandable_segments:true"), "must be True or False"));
  CHECK(says(refusal("max_split_size_mb:20"), "must be above 20"));
  CHECK(says(refusal("max_split_size_mb:1.5"), "whole number"));
  CHECK(says(refusal("max_split_size_mb:-5"), "whole number"));
  CHECK(says(refusal("max_split_size_mb:99999999999999"), "whole number"));
  CHECK(says(refusal("garbage_collection_threshold:1"), "above 0 and below 1"));
  CHECK(says(refusal("garbage_collection_threshold:0"), "above 0 and below 1"));
  CHECK(says(refusal("garbage_collection_threshold:0.5x"), "above 0 and below 1"));
  CHECK(says(refusal("garbage_collection_threshold:1e-1"), "above 0 and below 1"));
  CHECK(says(refusal("expandable_segments"), "needs a value"));
  CHECK(says(refusal("expandable_segments:True,,"), "empty setting"));
  CHECK(says(refusal("expandable_segments:True,expandable_segments:False"), "given twice"));
  CHECK(says(refusal("roundup_power2_divisions:4"), "roundup_power2_divisions: changes the allocator"));
  CHECK(says(refusal("backend:cudaMallocAsync"), "only backend:native"));
  CHECK(says(refusal("pinned_foo:1"), "unknown key"));
}
