#pragma once
/// @file error.hpp
/// The one exception type vramfit throws for bad input: it names the field (or flag) and what is
/// allowed, so a CLI can print it on one line and exit 2.

#include <stdexcept>
#include <string>
#include <string_view>

namespace vramfit {

/// Bad input: a field of a model shape, step, size string or config file that is out of range,
/// missing or mistyped. `field()` names it ("hidden", "--batch", "config.json: vocab_size").
class InvalidInput : public std::invalid_argument {
public:
  InvalidInput(std::string_view field, std::string_view message)
      : std::invalid_argument(std::string(field) + ": " + std::string(message)), field_(field) {}

  /// The field or flag at fault.
  [[nodiscard]] const std::string& field() const noexcept { return field_; }

private:
  std::string field_;
};

/// Byte arithmetic that would not fit in 64 bits. Never wrapped: the result is refused.
class Overflow : public std::overflow_error {
public:
  explicit Overflow(const std::string& what) : std::overflow_error(what) {}
};

}  // namespace vramfit
