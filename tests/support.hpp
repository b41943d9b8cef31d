#pragma once
// Helpers shared by the unit tests (doctest).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "vramfit/error.hpp"
#include "vramfit/phase.hpp"

namespace vramfit::test {

/// The field an `InvalidInput` thrown by `f` names, or "<no error>".
inline std::string field_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidInput& e) {
    return e.field();
  }
  return "<no error>";
}

/// Checks every phase of `got` against the five expected figures.
inline void check_phases(const PhaseBytes& got, std::uint64_t forward, std::uint64_t loss_backward,
                         std::uint64_t backward_top, std::uint64_t backward_bottom, std::uint64_t optimizer_step) {
  CHECK(got[Phase::forward].count() == forward);
  CHECK(got[Phase::loss_backward].count() == loss_backward);
  CHECK(got[Phase::backward_top].count() == backward_top);
  CHECK(got[Phase::backward_bottom].count() == backward_bottom);
  CHECK(got[Phase::optimizer_step].count() == optimizer_step);
}

}  // namespace vramfit::test
