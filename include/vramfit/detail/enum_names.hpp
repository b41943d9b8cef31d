#pragma once
/// @file detail/enum_names.hpp
/// One name table per enum drives both `to_string` and parsing, so a name printed is a name
/// accepted. A table is a specialisation of `EnumNames<E>` with `what` (the noun used in errors)
/// and `names` (value and name pairs, in the order the error lists them).

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"

namespace vramfit::detail {

template <class E>
struct EnumNames;  // specialised next to each enum, by VRAMFIT_ENUM_NAMES

}  // namespace vramfit::detail

/// The name table of enum `E` (a type in namespace vramfit): the noun used in errors, then
/// `{value, "name"}` pairs, as nlohmann's NLOHMANN_JSON_SERIALIZE_ENUM lists them.
#define VRAMFIT_ENUM_NAMES(E, WHAT, ...)                                                          \
  template <>                                                                                     \
  struct vramfit::detail::EnumNames<E> {                                                          \
    static constexpr std::string_view what = WHAT;                                                \
    static constexpr auto names = std::to_array<std::pair<E, std::string_view>>({__VA_ARGS__}); \
  }

namespace vramfit::detail {

/// The name of `value` in its table ("?" for a value the table lacks, which a test rules out).
template <class E>
constexpr std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::names)
    if (v == value) return name;
  return "?";
}

/// The names in the table, joined with `separator`.
template <class E>
std::string enum_name_list(std::string_view separator = "|") {
  std::string out;
  for (const auto& [v, name] : EnumNames<E>::names) {
    if (!out.empty()) out += separator;
    out += name;
  }
  return out;
}

/// The value named `text` (case-insensitive), or `InvalidInput` naming `field` and listing the names allowed.
template <class E>
constexpr E parse_enum(std::string_view text, std::string_view field) {
  for (const auto& [v, name] : EnumNames<E>::names)
    if (iequals(name, text)) return v;
  throw InvalidInput(field, "unknown " + std::string(EnumNames<E>::what) + " '" + std::string(text) + "' (allowed: " +
                                enum_name_list<E>(", ") + ")");
}

}  // namespace vramfit::detail
