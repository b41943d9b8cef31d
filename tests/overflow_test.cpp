// Byte arithmetic at the edges of the valid ranges: every figure of the closed forms, the
// sharded state, the estimate and the searches is exact or an `Overflow`, never wrapped. Exact
// is checked in 128 bits (a phase is the sum of its terms, required the peak plus the margin,
// the weights and logits their products), and a wrap anywhere shows as a figure that shrinks
// while a dimension grows.
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "vramfit/error.hpp"
#include "vramfit/estimate.hpp"
#include "vramfit/model.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/step.hpp"

using namespace vramfit;

namespace {

__extension__ typedef unsigned __int128 u128;  // __extension__: a GCC/Clang type, allowed under -Wpedantic
constexpr u128 max64 = std::numeric_limits<std::uint64_t>::max();

/// Extreme but valid shapes: each passes `validate`.
std::vector<ModelShape> extreme_shapes() {
  return {
      // vocab 2^20, hidden 65536, the most layers `validate` takes (ShapeLimits, vramfit/model.hpp)
      {.vocab = 1ULL << 20, .hidden = 65536, .intermediate = 1ULL << 18, .layers = ShapeLimits::layers, .heads = 512,
       .kv_heads = 64, .head_dim = 128},
      // every dimension at its limit
      {.vocab = ShapeLimits::vocab, .hidden = ShapeLimits::hidden, .intermediate = ShapeLimits::intermediate,
       .layers = ShapeLimits::layers, .heads = ShapeLimits::heads, .kv_heads = ShapeLimits::heads,
       .head_dim = ShapeLimits::head_dim, .tied_embeddings = true, .qkv_bias = true},
      // the most narrow layers, a plain MLP
      {.vocab = ShapeLimits::vocab, .hidden = 64, .intermediate = ShapeLimits::intermediate,
       .layers = ShapeLimits::layers, .heads = 1, .kv_heads = 1, .head_dim = ShapeLimits::head_dim,
       .gated_mlp = false},
      // a real model's shape (Llama-3.2-1B), the steps alone extreme
      {.vocab = 128256, .hidden = 2048, .intermediate = 8192, .layers = 16, .heads = 32, .kv_heads = 8,
       .head_dim = 64, .tied_embeddings = true},
  };
}

/// Steps around 2^40 tokens and at the limits of every count, in both modes and every layout.
std::vector<Step> extreme_steps() {
  std::vector<Step> out;
  const std::pair<std::uint64_t, std::uint64_t> sizes[] = {
      {1ULL << 16, 1ULL << 24}, {1ULL << 20, 1ULL << 20}, {1, 1ULL << 24}, {1ULL << 20, 1}, {1, 1}};
  const ShardingChoice layouts[] = {{Sharding::none, 0}, {Sharding::zero1, 0}, {Sharding::zero2, 0},
                                    {Sharding::full, 0}, {Sharding::hybrid, 256}};
  for (const auto& [batch, seq] : sizes)
    for (const Mode mode : {Mode::lora, Mode::full})
      for (const Attention attention : {Attention::flash, Attention::math})
        for (const ShardingChoice layout : layouts)
          for (const std::uint64_t world : {1ULL, 65536ULL})
            for (const PeakOver peak_over : {PeakOver::first_step, PeakOver::steady}) {
              if (layout.sharding == Sharding::hybrid && world == 1) continue;
              out.push_back(Step{.batch = batch, .seq = seq, .precision = Precision::fp32, .mode = mode,
                                 .lora = {.rank = 65536, .targets = TargetSet::all_linear()},
                                 .gradient_checkpointing = peak_over == PeakOver::steady, .attention = attention,
                                 .logits_retained = true, .peak_over = peak_over, .world_size = world,
                                 .sharding = layout.sharding, .shard_group = layout.shard_group});
            }
  return out;
}

/// `s` for `m`: LoRA on every projection `m` has, at the largest rank `validate` takes there.
Step for_shape(Step s, const ModelShape& m) {
  if (!m.gated_mlp) s.lora.targets = {Module::q_proj, Module::k_proj, Module::v_proj, Module::o_proj,
                                      Module::up_proj, Module::down_proj};
  s.lora.rank = max_lora_rank(m, s.lora.targets).first;
  return s;
}

/// Parameters in 128 bits, as `ModelShape::parameters` defines them.
u128 parameters128(const ModelShape& m) {
  const u128 q = u128(m.heads) * m.head_dimension(), kv = u128(m.kv_heads) * m.head_dimension();
  u128 layer = u128(m.hidden) * (2 * q + 2 * kv) + u128(m.hidden) * m.intermediate * (m.gated_mlp ? 3 : 2) +
               2 * u128(m.hidden);
  if (m.qkv_bias) layer += q + 2 * kv;
  return layer * m.layers + u128(m.vocab) * m.hidden * (m.tied_embeddings ? 1 : 2) + m.hidden;
}

std::size_t term_index(const Prediction& p, std::string_view name) {
  for (std::size_t k = 0; k < p.term_count; ++k)
    if (p.terms[k].name == name) return k;
  FAIL("no term ", name);
  return 0;
}

/// The prediction, or nullopt for an `Overflow` (any other exception fails the test).
template <class P>
std::optional<Prediction> predict_or_overflow(const ModelShape& m, const Step& s) {
  try {
    return P{}.predict(m, s);
  } catch (const Overflow&) {
    return std::nullopt;
  }
}

/// Every figure of `p` checked in 128 bits against what it is made of.
template <class P>
void check_exact(const Prediction& p, const ModelShape& m, const Step& s) {
  for (const Phase phase : all_phases) {
    u128 sum = 0;
    for (std::size_t k = 0; k < p.term_count; ++k) sum += p.terms[k].bytes[phase].count();
    CHECK(sum == p.phases[phase].count());
    CHECK(p.phases[phase] <= p.peak);
  }
  CHECK(p.peak == p.phases[p.phase]);
  const AllocatorMargin margin = P{}.margin();
  CHECK(u128(p.required.count()) == u128(p.peak.count()) + (u128(p.peak.count()) / 1000 + 1) * margin.per_mille +
                                        margin.fixed);
  // The logits: bytes per element of each phase x tokens x vocab.
  const PhaseBytes per_element = LogitsTerm<typename P::profile_type>::per_element(s);
  const std::size_t logits = term_index(p, "logits");
  for (const Phase phase : all_phases)
    CHECK(u128(p.terms[logits].bytes[phase].count()) ==
          u128(per_element[phase].count()) * s.batch * s.seq * m.vocab);
  // Full fine-tuning's state in the forward, unsharded: the weights, after the first step the
  // two AdamW moments, and with DDP (world size > 1) the bucket copy of the grads.
  const std::size_t parameters = term_index(p, "parameters");
  const u128 weights = parameters128(m) * element_bytes(s.precision);
  const unsigned copies = 1 + (s.peak_over == PeakOver::steady ? 2 : 0) + (s.world_size > 1 ? 1 : 0);
  if (s.mode == Mode::full && s.sharding == Sharding::none)
    CHECK(u128(p.terms[parameters].bytes[Phase::forward].count()) == copies * weights);
}

/// A stack's predictor with its profile named, for the per-element logits.
template <StackProfile P>
struct ClosedForm : StackPredictor<P> {
  using profile_type = P;
};

template <class P>
void sweep_closed_form() {
  std::size_t exact = 0, overflowed = 0;
  for (const ModelShape& m : extreme_shapes()) {
    REQUIRE_NOTHROW(validate(m));
    for (const Step& step : extreme_steps()) {
      const Step s = for_shape(step, m);
      CAPTURE(m.vocab);
      CAPTURE(m.layers);
      CAPTURE(s.batch);
      CAPTURE(s.seq);
      CAPTURE(to_string(s.sharding));
      const auto p = predict_or_overflow<P>(m, s);
      if (!p) {
        ++overflowed;
        continue;
      }
      ++exact;
      check_exact<P>(*p, m, s);
      // Where the logits alone pass 64 bits the prediction must have been refused.
      CHECK(u128(s.batch) * s.seq * m.vocab * 4 <= max64);
    }
  }
  // Both outcomes occur: the sweep reaches past 64 bits and stays inside them.
  CHECK(exact > 100);
  CHECK(overflowed > 100);
}

}  // namespace

TEST_CASE("closed forms at the edges: every figure exact in 128 bits, or Overflow") {
  sweep_closed_form<ClosedForm<profiles::HfPeft>>();
  sweep_closed_form<ClosedForm<profiles::LibTorch>>();
}

TEST_CASE("no figure shrinks as batch, sequence, layers or vocabulary double up to Overflow") {
  // A wrapped sum or product comes back smaller (mod 2^64). Every term but the allocator's slack
  // (which depends on how sizes pack into segments, and is bounded) grows with each dimension.
  // Once a step overflows, every larger one does.
  const ModelShape base = extreme_shapes()[0];
  for (const Step& extreme : extreme_steps()) {
    if (extreme.batch != 1 || extreme.seq != 1) continue;
    const Step start = for_shape(extreme, base);
    for (const int dimension : {0, 1, 2, 3}) {
      CAPTURE(dimension);
      CAPTURE(to_string(start.sharding));
      std::optional<Prediction> last;
      bool overflowed = false;
      for (std::uint64_t v = 1;; v *= 2) {
        ModelShape m = base;
        Step s = start;
        if (dimension == 0 && v > (1ULL << 20)) break;
        if (dimension == 1 && v > (1ULL << 24)) break;
        if (dimension == 2 && v > ShapeLimits::layers) break;
        if (dimension == 3 && v > ShapeLimits::vocab) break;
        (dimension == 0 ? s.batch : dimension == 1 ? s.seq : dimension == 2 ? m.layers : m.vocab) = v;
        const auto p = predict_or_overflow<HfPeftPredictor>(m, s);
        if (!p) {
          overflowed = true;
          continue;
        }
        CHECK_FALSE(overflowed);  // a larger step fits where a smaller one overflowed: a wrap
        for (std::size_t k = 0; k < p->term_count; ++k)
          for (const Phase phase : all_phases) {
            if (p->terms[k].name == "allocator slack") {
              CHECK(p->terms[k].bytes[phase].count() < (1ULL << 50));
            } else if (last) {
              CHECK(p->terms[k].bytes[phase] >= last->terms[k].bytes[phase]);
            }
          }
        last = p;
      }
    }
  }
}

TEST_CASE("estimate at the edges: the simulation's figures, or Overflow") {
  // Four layers (the fewest the programs take) keep the simulation cheap; 16 x 16384 tokens is
  // the largest step the recorded programs are used for, over a 2^20 vocabulary: terabytes.
  const ModelShape shapes[] = {
      {.vocab = 1ULL << 20, .hidden = 1ULL << 16, .intermediate = 1ULL << 18, .layers = 4, .heads = 1024,
       .kv_heads = 128, .head_dim = 64, .tied_embeddings = true, .qkv_bias = true},
      {.vocab = 1ULL << 20, .hidden = 1ULL << 16, .intermediate = 1ULL << 18, .layers = 4, .heads = 1024,
       .kv_heads = 1024, .head_dim = 64, .tied_embeddings = true}};
  std::size_t simulated = 0;
  for (const ModelShape& m : shapes)
    for (const Stack stack : {Stack::hf_peft, Stack::libtorch})
      for (const Mode mode : {Mode::lora, Mode::full}) {
        const Step s{.batch = 16, .seq = 16384, .mode = mode, .gradient_checkpointing = true};
        CAPTURE(m.qkv_bias);
        CAPTURE(to_string(stack));
        CAPTURE(to_string(mode));
        const Estimate e = estimate(m, s, stack);
        REQUIRE(e.simulation.has_value());
        ++simulated;
        const Simulation& sim = *e.simulation;
        CHECK(sim.first <= sim.steady);
        CHECK(e.peak == sim.steady);
        CHECK(sim.after_build.count() >= parameters128(m) * 2);  // the bf16 weights, at least
        const AllocatorMargin margin = simulated_margin;
        const u128 with_margin =
            u128(sim.peak.count()) + (u128(sim.peak.count()) / 1000 + 1) * margin.per_mille + margin.fixed;
        // The simulation path keeps the closed form's expected figure, not its bound, as a floor.
        const u128 closed = detail::visit_stack(
            stack, [&](auto def) { return typename decltype(def)::expected_predictor{}.predict(m, s).required.count(); });
        CHECK(u128(e.required.count()) == (with_margin > closed ? with_margin : closed));
      }
  CHECK(simulated == 8);
  // The largest simulated steps within the shape bounds: an estimate whose figures are exact, or Overflow.
  const ModelShape huge{.vocab = ShapeLimits::vocab, .hidden = ShapeLimits::hidden,
                        .intermediate = ShapeLimits::intermediate, .layers = 4, .heads = 1024, .kv_heads = 1024,
                        .head_dim = 64, .tied_embeddings = true, .qkv_bias = true};
  try {
    const Estimate e = estimate(huge, Step{.batch = 16, .seq = 16384});
    REQUIRE(e.simulation.has_value());
    CHECK(e.required > e.peak);
    CHECK(e.peak.count() >= e.closed_form.peak.count() / 2);  // a wrapped simulation would read far below
  } catch (const Overflow&) {
  }
  // Outside the programs' range (batch 2^20) the estimate is the closed form's, or Overflow.
  for (const ModelShape& m : extreme_shapes()) {
    const Step s{.batch = 1ULL << 20, .seq = 1ULL << 20};
    try {
      const Estimate e = estimate(m, s);
      CHECK_FALSE(e.simulation.has_value());
      CHECK(e.peak == e.closed_form.peak);
    } catch (const Overflow&) {
    }
  }
}

TEST_CASE("the searches at a 2^64 - 1 budget: a batch that fits, the next one not") {
  const Budget everything(Bytes(std::numeric_limits<std::uint64_t>::max()));
  for (const ModelShape& m : extreme_shapes())
    for (const Step& step : extreme_steps()) {
      if (step.attention == Attention::math || step.batch != 1) continue;  // a handful of each layout
      const Step s = for_shape(step, m);
      CAPTURE(m.vocab);
      CAPTURE(to_string(s.sharding));
      const HfPeftPredictor p;
      const std::uint64_t b = p.max_batch(m, s, everything);
      CHECK(b <= (1ULL << 20));
      const auto fits_at = [&](std::uint64_t batch) {
        Step at = s;
        at.batch = batch;
        return p.fits(m, at, everything);
      };
      if (b > 0) CHECK(fits_at(b));
      if (b > 0 && b < (1ULL << 20)) CHECK_FALSE(fits_at(b + 1));
      const std::uint64_t q = p.max_seq(m, s, everything);
      CHECK(q <= (1ULL << 24));
      // The estimate's search (no program applies in fp32): the closed form's answer, or an
      // Overflow where not even batch 1 fits in 64 bits.
      std::optional<std::uint64_t> found;
      try {
        found = max_batch(m, s, everything).value;
      } catch (const Overflow&) {
      }
      CHECK(found.value_or(0) == b);
    }
}
