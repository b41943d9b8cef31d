#pragma once
/// @file detail/json_describe.hpp
/// A JSON value as an error message shows it, in bounded time and stack: `nlohmann::json::dump`
/// recurses once per level, and a hostile file may nest arrays a hundred thousand deep.
/// Needs nlohmann-json.

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace vramfit::detail {

/// At most `limit` characters (and "..."), cut where no UTF-8 sequence is split.
inline std::string json_clip(std::string text, std::size_t limit = 40) {
  if (text.size() <= limit) return text;
  std::size_t cut = limit - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return text.substr(0, cut) + "...";
}

/// What a mistyped value is: `null`, `a boolean (true)`, `a string ("2")`, `an array ([64])`,
/// `an object`, or the number itself. An array shows its first elements, nested ones as [...].
inline std::string describe_json(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return "a boolean (" + v.dump() + ")";
    case nlohmann::json::value_t::string: return "a string (" + json_clip(v.dump()) + ")";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: {
      std::string text = "[";
      for (const nlohmann::json& e : v) {
        if (text.size() > 40) break;
        if (text.size() > 1) text += ",";
        text += e.is_array() ? "[...]" : e.is_object() ? "{...}" : json_clip(e.dump());
      }
      return "an array (" + json_clip(text + "]") + ")";
    }
    default: return json_clip(v.dump());
  }
}

}  // namespace vramfit::detail
