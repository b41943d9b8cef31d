#pragma once
// What every fuzz target asserts: an input ends in a valid result whose invariants hold, or in
// the library's own error (`InvalidInput`, `Overflow`). Any other exception escapes the target
// and libFuzzer reports it as a crash; a broken invariant aborts.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "vramfit/error.hpp"

namespace vramfit::fuzz {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "vramfit fuzz: contract broken: %s\n", what.c_str());
  std::abort();
}

/// Aborts with `what` unless `ok` (unlike assert, also with NDEBUG).
inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

/// `f()`, or nullopt when it throws one of the library's errors. An `InvalidInput` must name a
/// field starting with `field_prefix` and say something.
template <class F>
auto attempt(F&& f, std::string_view field_prefix = {}) -> std::optional<decltype(f())> {
  try {
    return f();
  } catch (const InvalidInput& e) {
    if (e.field().substr(0, field_prefix.size()) != field_prefix)
      fail("InvalidInput names '" + e.field() + "', not a field of '" + std::string(field_prefix) + "': " + e.what());
    if (std::string_view(e.what()).size() <= e.field().size() + 2) fail("InvalidInput without a message: " + e.field());
  } catch (const Overflow&) {
  }
  return std::nullopt;
}

/// `f()` on arguments that passed `validate`, or nullopt for an `Overflow`: refusing valid
/// arguments with `InvalidInput` breaks the contract.
template <class F>
auto attempt_valid(F&& f) -> std::optional<decltype(f())> {
  try {
    return f();
  } catch (const InvalidInput& e) {
    fail(std::string("valid arguments refused: ") + e.what());
  } catch (const Overflow&) {
  }
  return std::nullopt;
}

/// Whether `f()` (a `validate` call) accepts its arguments.
template <class F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const InvalidInput&) {
    return false;
  }
}

/// `f()`, which must not throw at all (`what` names it in the report).
template <class F>
auto must_succeed(F&& f, const char* what) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    fail(std::string(what) + " threw: " + e.what());
  }
}

}  // namespace vramfit::fuzz
