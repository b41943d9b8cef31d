#pragma once
// Helpers shared by the unit tests (doctest).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>

#ifdef VRAMFIT_HAS_JSON
#include <fstream>

#include <nlohmann/json.hpp>
#endif

#include "vramfit/error.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/step.hpp"

namespace vramfit::test {

/// The small made-up shape the hand-priced tests work out by hand: V 1000, h 64, i 160, 3 layers,
/// 4 heads (2 key/value), head_dim 16, untied.
inline constexpr ModelShape small{.vocab = 1000, .hidden = 64, .intermediate = 160, .layers = 3, .heads = 4,
                                  .kv_heads = 2};
/// LoRA r=4 on PEFT's default q_proj, v_proj over 2 x 8 tokens of `small`.
inline constexpr Step lora_qv{.batch = 2, .seq = 8, .lora = {.rank = 4, .targets = TargetSet::peft_default()}};

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

#ifdef VRAMFIT_HAS_JSON
/// The row of kind "trace" in tests/data/traces/NAME.jsonl (a recorded allocator trace).
inline nlohmann::json trace_row(const std::string& name) {
  std::ifstream in(std::string(VRAMFIT_TEST_DATA_DIR) + "/traces/" + name + ".jsonl");
  REQUIRE(in);
  std::string line;
  nlohmann::json row;
  while (std::getline(in, line))
    if (auto j = nlohmann::json::parse(line); j.value("kind", "") == "trace") row = j;
  REQUIRE(row.is_object());
  return row;
}
#endif

}  // namespace vramfit::test
