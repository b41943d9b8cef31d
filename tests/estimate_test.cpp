// estimate.hpp's searches: max_batch and max_seq say when their answer is the search's own limit.
#include <doctest/doctest.h>

#include <cstdint>

#include "vramfit/estimate.hpp"
#include "vramfit/presets.hpp"

using namespace vramfit;
using namespace vramfit::literals;

namespace {
constexpr std::uint64_t batch_limit = 1ULL << 20;  // validate(Step)'s batch bound
constexpr std::uint64_t seq_limit = 1ULL << 24;    // and its seq bound
const Budget huge(Bytes(1ULL << 62));
}  // namespace

// `max-batch` with a huge budget answered 1048576, its internal cap, without saying so:
// SearchResult::capped says it, and only then.
TEST_CASE("a search that reaches its limit says so") {
  const ModelShape m = *find_preset("SmolLM2-135M");
  for (Stack stack : {Stack::hf_peft, Stack::libtorch}) {
    CAPTURE(to_string(stack));
    const SearchResult batch = max_batch(m, Step{.seq = 16}, huge, stack);
    CHECK(batch.value == batch_limit);
    CHECK(batch.capped);
    CHECK(batch.at.fits(huge));
    const SearchResult seq = max_seq(m, Step{.batch = 1}, huge, stack);
    CHECK(seq.value == seq_limit);
    CHECK(seq.capped);
  }
}

TEST_CASE("a search that stops below its limit is not capped") {
  const ModelShape m = *find_preset("SmolLM2-135M");
  const SearchResult batch = max_batch(m, Step{.seq = 1024}, Budget(24_GiB));
  CHECK(batch.value > 0);
  CHECK(batch.value < batch_limit);
  CHECK_FALSE(batch.capped);
  const SearchResult seq = max_seq(m, Step{.batch = 2}, Budget(24_GiB));
  CHECK(seq.value > 0);
  CHECK(seq.value < seq_limit);
  CHECK_FALSE(seq.capped);
  // Nothing fits: 0, not capped.
  const SearchResult none = max_batch(m, Step{}, Budget(1_MiB));
  CHECK(none.value == 0);
  CHECK_FALSE(none.capped);
}
