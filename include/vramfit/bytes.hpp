#pragma once
/// @file bytes.hpp
/// `Bytes`: a count of bytes with overflow-checked arithmetic, and `parse_size` for sizes as
/// people write them ("24GiB", "23.0 GB", "80e9B", "16384MiB").

#include <compare>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "vramfit/error.hpp"

namespace vramfit {

namespace detail {
[[noreturn]] inline void overflow(const char* what) { throw Overflow(std::string("byte count overflows 64 bits in ") + what); }

// The compiler's overflow builtins (GCC and Clang; usable in constant expressions) test the
// carry and overflow flags instead of dividing: a predict makes dozens of these.
constexpr std::uint64_t checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) overflow("addition");
  return sum;
}
constexpr std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) overflow("multiplication");
  return product;
}
constexpr std::uint64_t checked_sub(std::uint64_t a, std::uint64_t b) {
  if (b > a) overflow("subtraction (negative result)");
  return a - b;
}
}  // namespace detail

/// A non-negative number of bytes. Every operation that would leave 0..2^64-1 throws `Overflow`
/// (and so fails to compile when it happens in a constant expression).
struct Bytes {
  std::uint64_t value = 0;

  constexpr Bytes() = default;
  constexpr explicit Bytes(std::uint64_t v) : value(v) {}

  [[nodiscard]] constexpr std::uint64_t count() const { return value; }
  /// Decimal gigabytes (1e9), the unit of the record's tables.
  [[nodiscard]] constexpr double gigabytes() const { return static_cast<double>(value) / 1e9; }
  [[nodiscard]] constexpr double gibibytes() const { return static_cast<double>(value) / 1073741824.0; }

  constexpr Bytes& operator+=(Bytes o) { value = detail::checked_add(value, o.value); return *this; }
  constexpr Bytes& operator-=(Bytes o) { value = detail::checked_sub(value, o.value); return *this; }
  friend constexpr Bytes operator+(Bytes a, Bytes b) { return Bytes(detail::checked_add(a.value, b.value)); }
  friend constexpr Bytes operator-(Bytes a, Bytes b) { return Bytes(detail::checked_sub(a.value, b.value)); }
  friend constexpr Bytes operator*(Bytes a, std::uint64_t n) { return Bytes(detail::checked_mul(a.value, n)); }
  friend constexpr Bytes operator*(std::uint64_t n, Bytes a) { return Bytes(detail::checked_mul(a.value, n)); }
  friend constexpr auto operator<=>(Bytes, Bytes) = default;
  friend constexpr bool operator==(Bytes, Bytes) = default;
};

/// The larger of two byte counts.
constexpr Bytes max(Bytes a, Bytes b) { return a < b ? b : a; }

/// Product of element counts and a per-element size, checked at every step.
constexpr Bytes bytes_of(std::uint64_t per_element, std::initializer_list<std::uint64_t> dims) {
  std::uint64_t n = per_element;
  for (auto d : dims) n = detail::checked_mul(n, d);
  return Bytes(n);
}

namespace literals {
constexpr Bytes operator""_B(unsigned long long v) { return Bytes(v); }
constexpr Bytes operator""_KiB(unsigned long long v) { return Bytes(detail::checked_mul(v, 1024ULL)); }
constexpr Bytes operator""_MiB(unsigned long long v) { return Bytes(detail::checked_mul(v, 1024ULL * 1024)); }
constexpr Bytes operator""_GiB(unsigned long long v) { return Bytes(detail::checked_mul(v, 1024ULL * 1024 * 1024)); }
constexpr Bytes operator""_GB(unsigned long long v) { return Bytes(detail::checked_mul(v, 1000ULL * 1000 * 1000)); }
constexpr Bytes operator""_MB(unsigned long long v) { return Bytes(detail::checked_mul(v, 1000ULL * 1000)); }
}  // namespace literals

namespace detail {
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
constexpr bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace detail

/**
 * Parse a size as users write it: a decimal number (optional fraction and exponent) and a unit,
 * case-insensitive: B; decimal kB, MB, GB, TB and their short forms k, M, G, T (powers of 1000);
 * binary KiB, MiB, GiB, TiB (powers of 1024). A number without a unit is refused: "24" would be
 * 24 bytes, never what a budget means. Fractional bytes round down. `field` names the input in
 * the error ("--budget").
 *
 *     parse_size("24GiB")   == Bytes(25769803776)
 *     parse_size("23.0 GB") == Bytes(23000000000)
 *     parse_size("80e9B")   == Bytes(80000000000)
 */
constexpr Bytes parse_size(std::string_view text, std::string_view field = "size") {
  __extension__ typedef unsigned __int128 u128;  // __extension__: a GCC/Clang type, allowed under -Wpedantic
  const auto fail = [&](std::string_view why) -> Bytes {
    throw InvalidInput(field, std::string(why) + " (got '" + std::string(text) +
                                  "'; expected a number and a unit, e.g. 24GB, 24GiB, 23.0 GB, 80e9B, 16384MiB)");
  };
  std::string_view s = detail::trim(text);
  if (s.empty()) return fail("empty size");
  if (s.front() == '-') return fail("a size cannot be negative");
  if (s.front() == '+') s.remove_prefix(1);

  u128 mantissa = 0;
  int digits = 0, fraction_digits = 0;
  bool seen_point = false;
  std::size_t i = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (detail::is_digit(c)) {
      mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
      ++digits;
      if (seen_point) ++fraction_digits;
      // 10^20 significant: times a unit (< 2^41) and one more factor of 10 stays inside 128 bits.
      if (mantissa > u128(10000000000ULL) * 10000000000ULL) return fail("too many significant digits");
    } else if (c == '.' && !seen_point) {
      seen_point = true;
    } else {
      break;
    }
  }
  if (digits == 0) return fail("no digits");
  int exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    if (i >= s.size() || !detail::is_digit(s[i])) return fail("exponent has no digits");
    for (; i < s.size() && detail::is_digit(s[i]); ++i) {
      exponent = exponent * 10 + (s[i] - '0');
      if (exponent > 40) return fail("exponent out of range");
    }
    if (negative) exponent = -exponent;
  }
  const std::string_view unit = detail::trim(s.substr(i));
  u128 multiplier = 1;
  struct Unit { std::string_view name; std::uint64_t factor; };
  constexpr Unit units[] = {
      {"b", 1}, {"kb", 1000ULL}, {"mb", 1000000ULL}, {"gb", 1000000000ULL},
      {"tb", 1000000000000ULL}, {"kib", 1ULL << 10}, {"mib", 1ULL << 20}, {"gib", 1ULL << 30},
      {"tib", 1ULL << 40}, {"k", 1000ULL}, {"m", 1000000ULL}, {"g", 1000000000ULL}, {"t", 1000000000000ULL}};
  if (unit.empty()) {
    const std::string number(s.substr(0, i));
    throw InvalidInput(field, "'" + number + "' has no unit: write " + number + "GB or " + number +
                                  "GiB (a size without a unit would be bytes)");
  }
  bool known = false;
  for (const auto& u : units)
    if (detail::iequals(unit, u.name)) { multiplier = u.factor; known = true; break; }
  if (!known) return fail("unknown unit '" + std::string(unit) + "' (allowed: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, and k, M, G, T for kB to TB)");

  // value = mantissa * multiplier * 10^(exponent - fraction_digits), rounded down.
  u128 value = mantissa * multiplier;
  int scale = exponent - fraction_digits;
  constexpr u128 limit = std::numeric_limits<std::uint64_t>::max();
  for (; scale > 0; --scale) {
    if (value > limit) break;
    value *= 10;
  }
  for (; scale < 0; ++scale) value /= 10;
  if (value > limit) return fail("size does not fit in 64 bits");
  return Bytes(static_cast<std::uint64_t>(value));
}

}  // namespace vramfit
