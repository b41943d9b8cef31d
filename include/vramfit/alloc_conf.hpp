#pragma once
/// @file alloc_conf.hpp
/// `AllocConf`: the caching-allocator settings the simulation models, and `parse_alloc_conf` for
/// them in `PYTORCH_CUDA_ALLOC_CONF`'s own syntax ("expandable_segments:True,max_split_size_mb:512").
/// Rules and ranges as c10's CUDAAllocatorConfig::parseArgs checks them. A key that changes device
/// memory in a way the model does not follow (roundup_power2_divisions, backend:cudaMallocAsync,
/// ...) is refused rather than ignored, so no answer silently assumes the default.
///
///     const vramfit::AllocConf conf = vramfit::parse_alloc_conf("expandable_segments:True");

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"

namespace vramfit {

/// The allocator settings the simulation follows. The defaults are PyTorch's.
struct AllocConf {
  bool expandable_segments = false;           ///< segments grow by pages (c10's ExpandableSegment)
  std::optional<std::uint64_t> max_split_size;  ///< bytes; blocks this large are never split (none: no limit)
  std::optional<double> garbage_collection_threshold;  ///< in (0, 1); acts only under a budget
  friend bool operator==(const AllocConf&, const AllocConf&) = default;
};

/// The bytes the caching allocator may reserve under `torch.cuda.set_per_process_memory_fraction
/// (fraction)` on a card of `total` bytes, as c10's setMemoryFraction computes
/// allowed_memory_maximum: `static_cast<size_t>(fraction * total)`.
inline std::uint64_t memory_fraction_limit(std::uint64_t total, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) throw InvalidInput("fraction", "must be 0 to 1");
  return static_cast<std::uint64_t>(fraction * static_cast<double>(total));
}

/// `conf` in PYTORCH_CUDA_ALLOC_CONF syntax ("" for the defaults).
inline std::string to_string(const AllocConf& conf) {
  std::string out;
  const auto add = [&](const std::string& kv) { out += (out.empty() ? "" : ",") + kv; };
  if (conf.expandable_segments) add("expandable_segments:True");
  if (conf.max_split_size) add("max_split_size_mb:" + std::to_string(*conf.max_split_size >> 20));
  if (conf.garbage_collection_threshold) {
    char buf[64];  // the shortest fixed-point text that reads back as the same double
    const auto r = std::to_chars(buf, buf + sizeof buf, *conf.garbage_collection_threshold, std::chars_format::fixed);
    add("garbage_collection_threshold:" + std::string(buf, r.ptr));
  }
  return out;
}

/// Parses `text` ("key:value" pairs separated by commas, as PYTORCH_CUDA_ALLOC_CONF). Throws
/// `InvalidInput` naming `field` and the key for an unknown key, a bad value, a repeated key, or a
/// key whose effect the model does not follow.
inline AllocConf parse_alloc_conf(std::string_view text, std::string_view field = "--alloc-conf") {
  AllocConf out;
  const std::string f(field);
  // The key as printable text (a control byte would cut the message short).
  const auto shown = [](std::string_view t) {
    std::string s(t.substr(0, 64));
    for (char& ch : s)
      if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
    return s;
  };
  const auto bad = [&](std::string_view key, const std::string& why) -> InvalidInput {
    return InvalidInput(f, (key.empty() ? std::string() : shown(key) + ": ") + why);
  };
  const std::string_view known =
      "expandable_segments:True|False, max_split_size_mb:N (N > 20), garbage_collection_threshold:X (0 < X < 1)";
  bool seen_expandable = false, seen_split = false, seen_gc = false;
  std::string_view rest = text;
  while (!detail::trim(rest).empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = detail::trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (item.empty()) throw bad("", "an empty setting between commas; allowed: " + std::string(known));
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos)
      throw bad(item, "needs a value after ':' (key:value); allowed: " + std::string(known));
    const std::string_view key = detail::trim(item.substr(0, colon));
    const std::string_view value = detail::trim(item.substr(colon + 1));
    const auto once = [&](bool& seen) {
      if (seen) throw bad(key, "given twice");
      seen = true;
    };
    if (key == "expandable_segments") {
      once(seen_expandable);
      if (value == "True") out.expandable_segments = true;
      else if (value == "False") out.expandable_segments = false;
      else throw bad(key, "must be True or False (as PyTorch spells them), got '" + shown(value) + "'");
    } else if (key == "max_split_size_mb") {
      once(seen_split);
      // CUDAAllocatorConfig::parseMaxSplitSize: a whole number of MiB above kLargeBuffer (20 MiB).
      std::uint64_t mb = 0;
      bool digits = !value.empty() && value.size() <= 12;
      for (const char c : value) digits = digits && c >= '0' && c <= '9';
      if (!digits) throw bad(key, "must be a whole number of MiB above 20, got '" + shown(value) + "'");
      for (const char c : value) mb = mb * 10 + static_cast<std::uint64_t>(c - '0');
      if (mb <= 20) throw bad(key, "must be above 20 (MiB), as PyTorch requires; got " + std::to_string(mb));
      out.max_split_size = mb << 20;
    } else if (key == "garbage_collection_threshold") {
      once(seen_gc);
      // CUDAAllocatorConfig::parseGarbageCollectionThreshold: 0 < X < 1.
      double x = 0;
      std::size_t used = 0;
      bool ok = !value.empty() && value.size() <= 32;
      for (const char c : value) ok = ok && ((c >= '0' && c <= '9') || c == '.');
      if (ok) {
        try {
          x = std::stod(std::string(value), &used);
        } catch (const std::exception&) {
          ok = false;
        }
      }
      if (!ok || used != value.size() || !(x > 0.0 && x < 1.0))
        throw bad(key, "must be a number above 0 and below 1, got '" + shown(value) + "'");
      out.garbage_collection_threshold = x;
    } else if (key == "backend") {
      if (value != "native")
        throw bad(key, "only backend:native (the caching allocator) is modelled, got '" + shown(value) + "'");
    } else if (key == "roundup_power2_divisions" || key == "max_non_split_rounding_mb" ||
               key == "per_process_memory_fraction" || key == "graph_capture_record_stream_reuse") {
      throw bad(key, "changes the allocator in a way vramfit does not model (give --budget for a memory "
                     "limit); allowed: " + std::string(known));
    } else if (key == "release_lock_on_cudamalloc" || key.starts_with("pinned_")) {
      // Locking and pinned host memory: no effect on device memory; checked as PyTorch does.
      if (key == "release_lock_on_cudamalloc" && value != "True" && value != "False")
        throw bad(key, "must be True or False, got '" + shown(value) + "'");
      if (key != "release_lock_on_cudamalloc" && key != "pinned_use_cuda_host_register" &&
          key != "pinned_num_register_threads" && key != "pinned_use_background_threads")
        throw bad(key, "unknown key; allowed: " + std::string(known));
    } else {
      throw bad(key, "unknown key; allowed: " + std::string(known));
    }
  }
  return out;
}

}  // namespace vramfit
