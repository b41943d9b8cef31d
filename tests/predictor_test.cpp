// Predictor: the peak is the largest phase, monotone in every size; fits, max_batch and max_seq
// answer exactly against a budget; user-defined terms plug in.
#include <doctest/doctest.h>

#include "support.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include "vramfit/error.hpp"
#include "vramfit/model.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/step.hpp"
#include "vramfit/terms.hpp"

using namespace vramfit;
using namespace vramfit::literals;

namespace {

constexpr std::uint64_t batch_limit = 1ULL << 20;  // validate(Step) allows batch up to 2^20
constexpr std::uint64_t seq_limit = 1ULL << 24;    // and seq up to 2^24
constexpr Budget unlimited{Bytes(std::numeric_limits<std::uint64_t>::max())};

ModelShape model(std::string_view name) { return preset(name); }

/// A deterministic stream of numbers (64-bit LCG, Knuth's MMIX constants).
struct Lcg {
  std::uint64_t state;
  std::uint64_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
};

/// A varied step: mode, precision, checkpointing, attention, logits kept, first or steady, LoRA.
/// A random step on `m`: its LoRA rank at most `max_lora_rank` of its targets.
Step random_step(Lcg& rng, const ModelShape& m) {
  constexpr std::uint64_t seqs[] = {1, 17, 128, 512, 1000, 2048, 4096, 8192};
  constexpr std::uint64_t ranks[] = {1, 4, 8, 16, 64, 256};
  const TargetSet targets[] = {TargetSet::peft_default(), TargetSet::attention(), TargetSet::all_linear(),
                               TargetSet{Module::down_proj}, TargetSet{Module::o_proj, Module::up_proj}};
  Step s;
  s.batch = 1 + rng.below(16);
  s.seq = seqs[rng.below(std::size(seqs))];
  s.precision = rng.below(4) == 0 ? Precision::fp32 : (rng.below(2) == 0 ? Precision::bf16 : Precision::fp16);
  s.mode = rng.below(3) == 0 ? Mode::full : Mode::lora;
  s.lora.rank = ranks[rng.below(std::size(ranks))];
  s.lora.targets = targets[rng.below(std::size(targets))];
  s.gradient_checkpointing = rng.below(2) == 0;
  s.attention = rng.below(5) == 0 ? Attention::math : Attention::flash;
  s.logits_retained = rng.below(2) == 0;
  s.peak_over = rng.below(3) == 0 ? PeakOver::first_step : PeakOver::steady;
  s.lora.rank = std::min(s.lora.rank, max_lora_rank(m, s.lora.targets).first);
  return s;
}

/// A budget from 1 MiB to about 200 GB, with small ones (where nothing fits) now and then.
Budget random_budget(Lcg& rng) {
  switch (rng.below(6)) {
    case 0: return Budget(Bytes(1 + rng.below(1ULL << 30)));           // up to 1 GiB
    case 1: return Budget(Bytes((1 + rng.below(200)) * 1000000000ULL));  // whole gigabytes
    default: return Budget(Bytes(rng.below(200ULL * 1000000000ULL) + 1));
  }
}

template <class P>
bool fits_at_batch(const P& predictor, const ModelShape& m, Step s, Budget b, std::uint64_t batch) {
  s.batch = batch;
  return predictor.fits(m, s, b);
}
template <class P>
bool fits_at_seq(const P& predictor, const ModelShape& m, Step s, Budget b, std::uint64_t seq) {
  s.seq = seq;
  return predictor.fits(m, s, b);
}

/// A search's answer `n` fits and `n` + 1 does not (or `n` is the limit); 0 means 1 does not fit.
template <class FitsAt>
void check_boundary(std::uint64_t n, std::uint64_t limit, FitsAt fits_at) {
  CAPTURE(n);
  REQUIRE(n <= limit);
  if (n == 0) {
    CHECK_FALSE(fits_at(1));
    return;
  }
  CHECK(fits_at(n));
  if (n < limit) CHECK_FALSE(fits_at(n + 1));
}

template <class P>
void check_max_batch_boundary(const P& predictor, const ModelShape& m, const Step& s, Budget b) {
  check_boundary(predictor.max_batch(m, s, b), batch_limit,
                 [&](std::uint64_t v) { return fits_at_batch(predictor, m, s, b, v); });
}

template <class P>
void check_max_seq_boundary(const P& predictor, const ModelShape& m, const Step& s, Budget b) {
  check_boundary(predictor.max_seq(m, s, b), seq_limit, [&](std::uint64_t v) { return fits_at_seq(predictor, m, s, b, v); });
}

/// A term priced as a constant plus so many bytes per token, in every phase.
struct AffineTerm {
  static constexpr std::string_view name = "affine";
  std::uint64_t fixed = 0;
  std::uint64_t per_token = 0;
  constexpr PhaseBytes operator()(const ModelShape&, const Step& s) const {
    PhaseBytes out;
    out.add_everywhere(Bytes(fixed) + bytes_of(per_token, {s.tokens()}));
    return out;
  }
};

/// A term that grows with the square of the batch: not affine, so max_batch cannot solve for it.
struct QuadraticInBatchTerm {
  static constexpr std::string_view name = "quadratic";
  std::uint64_t per_batch_squared = 0;
  constexpr PhaseBytes operator()(const ModelShape&, const Step& s) const {
    PhaseBytes out;
    out[Phase::backward_top] = bytes_of(per_batch_squared, {s.batch, s.batch});
    return out;
  }
};

/// A fused linear cross-entropy (Liger, Cut Cross-Entropy): a few fp32 values per token instead of
/// the logits. Priced only in the loss phases.
struct FusedLossTerm {
  static constexpr std::string_view name = "fused loss";
  constexpr PhaseBytes operator()(const ModelShape&, const Step& s) const {
    PhaseBytes out;
    out[Phase::forward] = bytes_of(8, {s.tokens()});
    out[Phase::loss_backward] = bytes_of(8, {s.tokens()});
    return out;
  }
};

constexpr AllocatorMargin no_margin{.per_mille = 0, .fixed = 0};

}  // namespace

TEST_CASE("the peak is the largest phase total, and the totals add the terms") {
  const HfPeftPredictor hf;
  const LibTorchPredictor lt;
  Lcg rng{1};
  for (int k = 0; k < 200; ++k) {
    const auto& preset = presets[rng.below(presets.size())];
    const Step s = random_step(rng, preset.shape);
    CAPTURE(preset.name);
    CAPTURE(k);
    for (const Prediction& p : {hf.predict(preset.shape, s), lt.predict(preset.shape, s)}) {
      REQUIRE(p.term_count == 5);
      Bytes largest;
      for (Phase phase : all_phases) {
        Bytes sum;
        for (std::size_t t = 0; t < p.term_count; ++t) sum += p.terms[t].bytes[phase];
        CHECK(p.phases[phase] == sum);
        CHECK(p.phases[phase] <= p.peak);
        largest = max(largest, p.phases[phase]);
      }
      CHECK(p.peak == largest);
      CHECK(p.phases[p.phase] == p.peak);
      // Margin: 260 per mille of the peak (rounded up by one thousandth) plus 64 MiB.
      CHECK(p.required.count() == p.peak.count() + (p.peak.count() / 1000 + 1) * 260 + 64 * 1048576);
      Bytes at_peak;
      for (std::size_t t = 0; t < p.term_count; ++t) at_peak += p.term_at_peak(t);
      CHECK(at_peak == p.peak);
    }
  }
}

TEST_CASE("term names, order and the stack name") {
  const auto p = HfPeftPredictor{}.predict(model("SmolLM2-135M"), Step{});
  CHECK(p.terms[0].name == "parameters");
  CHECK(p.terms[1].name == "activations");
  CHECK(p.terms[2].name == "logits");
  CHECK(p.terms[3].name == "workspace");
  CHECK(p.stack == "hf-peft");
  CHECK(LibTorchPredictor::stack == "libtorch");
  CHECK(LibTorchPredictor{}.predict(model("SmolLM2-135M"), Step{}).stack == "libtorch");
}

TEST_CASE("where the peak falls") {
  const HfPeftPredictor hf;
  SUBCASE("full fine-tuning of short sequences: the optimizer step (weights, grads, moments, temporaries)") {
    for (const char* name : {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B", "Mistral-7B-v0.1"}) {
      CAPTURE(name);
      const auto p = hf.predict(model(name), Step{.batch = 1, .seq = 128, .mode = Mode::full});
      CHECK(p.phase == Phase::optimizer_step);
      CHECK(to_string(p.phase) == "optimizer step");
      CHECK(to_key(p.phase) == "optimizer_step");
    }
  }
  SUBCASE("LoRA on long sequences: the backward of the loss (12 B per logits element)") {
    for (const char* name : {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B"}) {
      CAPTURE(name);
      const auto p = hf.predict(model(name), Step{.batch = 1, .seq = 4096});
      CHECK(p.phase == Phase::loss_backward);
      CHECK(to_string(p.phase) == "loss backward");
      CHECK(to_key(p.phase) == "loss_backward");
    }
  }
  SUBCASE("full fine-tuning of long sequences moves the peak out of the optimizer step") {
    const auto p = hf.predict(model("SmolLM2-135M"), Step{.batch = 8, .seq = 4096, .mode = Mode::full});
    CHECK(p.phase != Phase::optimizer_step);
  }
}

TEST_CASE("the first step peaks no higher than the steady state") {
  Lcg rng{7};
  for (int k = 0; k < 100; ++k) {
    const auto& preset = presets[rng.below(presets.size())];
    Step s = random_step(rng, preset.shape);
    s.peak_over = PeakOver::steady;
    const auto steady = HfPeftPredictor{}.predict(preset.shape, s);
    s.peak_over = PeakOver::first_step;
    const auto first = HfPeftPredictor{}.predict(preset.shape, s);
    CHECK(first.peak <= steady.peak);
    // Both have the optimizer step, where the moments exist in either case.
    CHECK(first.phases[Phase::optimizer_step] == steady.phases[Phase::optimizer_step]);
  }
}

namespace {
/// Checks that both stacks' peaks do not decrease as `at(k)` walks the grid `values`.
template <class MakeInputs>
void check_non_decreasing(const std::vector<std::uint64_t>& values, MakeInputs at) {
  const HfPeftPredictor hf;
  const LibTorchPredictor lt;
  Bytes previous_hf, previous_lt;
  for (std::uint64_t v : values) {
    CAPTURE(v);
    const auto [m, s] = at(v);
    const Bytes now_hf = hf.predict(m, s).peak, now_lt = lt.predict(m, s).peak;
    CHECK(previous_hf <= now_hf);
    CHECK(previous_lt <= now_lt);
    previous_hf = now_hf;
    previous_lt = now_lt;
  }
}

std::vector<std::uint64_t> grid(std::uint64_t first, std::uint64_t last) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t v = first; v <= last; v = v * 3 / 2 + 1) out.push_back(v);
  return out;
}
}  // namespace

TEST_CASE("the prediction does not decrease in batch, sequence, vocabulary or rank") {
  const std::vector<Step> bases = {
      Step{}, Step{.mode = Mode::full}, Step{.gradient_checkpointing = true},
      Step{.attention = Attention::math, .logits_retained = true},
      Step{.precision = Precision::fp32, .lora = {.rank = 16, .targets = TargetSet::all_linear()}},
      Step{.mode = Mode::full, .gradient_checkpointing = true, .peak_over = PeakOver::first_step}};
  const ModelShape qwen = model("Qwen2.5-0.5B");
  for (std::size_t b = 0; b < bases.size(); ++b) {
    CAPTURE(b);
    const Step base = bases[b];
    std::vector<std::uint64_t> batches;
    for (std::uint64_t batch = 1; batch <= 64; ++batch) batches.push_back(batch);
    check_non_decreasing(batches, [&](std::uint64_t batch) {
      Step s = base;
      s.seq = 512;
      s.batch = batch;
      return std::pair{qwen, s};
    });
    check_non_decreasing(grid(1, 20000), [&](std::uint64_t seq) {
      Step s = base;
      s.seq = seq;
      return std::pair{qwen, s};
    });
    check_non_decreasing(grid(1, 300000), [&](std::uint64_t vocab) {
      ModelShape m = qwen;
      m.vocab = vocab;
      return std::pair{m, base};
    });
    check_non_decreasing(grid(1, max_lora_rank(qwen, base.lora.targets).first), [&](std::uint64_t rank) {
      Step s = base;
      s.lora.rank = rank;
      return std::pair{qwen, s};
    });
  }
}

TEST_CASE("every token costs something: the prediction grows strictly with batch") {
  const ModelShape m = model("SmolLM2-135M");
  Bytes previous;
  for (std::uint64_t batch = 1; batch <= 32; ++batch) {
    const Bytes now = HfPeftPredictor{}.predict(m, Step{.batch = batch, .seq = 256}).peak;
    CHECK(previous < now);
    previous = now;
  }
}

TEST_CASE("fits compares the prediction with its margin to the budget") {
  const HfPeftPredictor hf;
  const ModelShape m = model("SmolLM2-135M");
  const Step s{.batch = 4, .seq = 2048};
  const Prediction p = hf.predict(m, s);
  CHECK(hf.fits(m, s, Budget(p.required)));
  CHECK_FALSE(hf.fits(m, s, Budget(p.required - Bytes(1))));
  CHECK(p <= Budget(p.required));
  CHECK(p > Budget(p.required - Bytes(1)));
  // The allocated peak alone is not enough: the margin must fit too.
  CHECK_FALSE(hf.fits(m, s, Budget(p.peak)));
}

TEST_CASE("a step whose bytes overflow 64 bits does not fit; predict says why") {
  const HfPeftPredictor hf;
  // 2^44 tokens x 151936 vocab x 12 B: far past 2^64.
  const Step huge{.batch = batch_limit, .seq = seq_limit};
  CHECK_FALSE(hf.fits(model("Qwen2.5-0.5B"), huge, unlimited));
  CHECK_THROWS_AS((void)hf.predict(model("Qwen2.5-0.5B"), huge), Overflow);
  // The math backend's score matrices overflow at a batch the logits alone would allow.
  const Step math{.batch = 1 << 16, .seq = 1 << 20, .attention = Attention::math};  // 9 x 2^56 scores per layer
  CHECK_FALSE(hf.fits(model("SmolLM2-135M"), math, unlimited));
  // And bad input is still an error, not a "does not fit".
  CHECK_THROWS_AS((void)hf.fits(model("SmolLM2-135M"), Step{.batch = 0}, unlimited), InvalidInput);
}

TEST_CASE("a shape beyond the bounds is bad input, named by its field, not a \"does not fit\"") {
  // ~2^66 parameters if it were allowed: validate() refuses it as InvalidInput (CLI exit 2), and
  // fits() reports bad input rather than "does not fit".
  const ModelShape huge{.vocab = 1, .hidden = 1ULL << 24, .intermediate = 1ULL << 24, .layers = 100000,
                        .heads = 256, .kv_heads = 1};
  CHECK(test::field_of([&] { validate(huge); }) == "hidden");
  CHECK_THROWS_AS((void)HfPeftPredictor{}.fits(huge, Step{}, unlimited), InvalidInput);
}

namespace {
// Checks max_batch's or max_seq's boundary on both stacks over `cases` random presets, steps and
// budgets, and counts how often the hf-peft answer is 0 and how often it is larger, so a caller
// can see the grid reaches both sides.
struct BoundaryCounts {
  int zeros = 0, positives = 0;
};
enum class Search : std::uint8_t { batch, seq };
BoundaryCounts check_boundaries(std::uint64_t seed, int cases, Search search) {
  const HfPeftPredictor hf;
  const LibTorchPredictor lt;
  Lcg rng{seed};
  BoundaryCounts counts;
  const auto check = [&](const auto& p, const ModelShape& m, const Step& s, Budget b) {
    if (search == Search::batch) check_max_batch_boundary(p, m, s, b);
    else check_max_seq_boundary(p, m, s, b);
  };
  for (int k = 0; k < cases; ++k) {
    const auto& preset = presets[rng.below(presets.size())];
    const Step s = random_step(rng, preset.shape);
    const Budget b = random_budget(rng);
    CAPTURE(k);
    CAPTURE(preset.name);
    CAPTURE(b.usable.count());
    check(hf, preset.shape, s, b);
    check(lt, preset.shape, s, b);
    const std::uint64_t answer =
        search == Search::batch ? hf.max_batch(preset.shape, s, b) : hf.max_seq(preset.shape, s, b);
    (answer == 0 ? counts.zeros : counts.positives)++;
  }
  return counts;
}
}  // namespace

TEST_CASE("max_batch and max_seq are exact at the boundary, over many configurations and budgets") {
  const BoundaryCounts batch = check_boundaries(42, 300, Search::batch);
  const BoundaryCounts seq = check_boundaries(1234, 200, Search::seq);
  // The grids reach both sides.
  CHECK(batch.zeros > 10);
  CHECK(batch.positives > 10);
  CHECK(seq.zeros > 5);
  CHECK(seq.positives > 10);
}

TEST_CASE("max_batch agrees with a linear search") {
  const LibTorchPredictor lt;
  Lcg rng{3};
  for (int k = 0; k < 60; ++k) {
    const auto& preset = presets[rng.below(presets.size())];
    Step s = random_step(rng, preset.shape);
    s.seq = 2048;
    const Budget b(Bytes((1 + rng.below(80)) * 1000000000ULL));
    std::uint64_t expected = 0;
    while (expected < 400 && fits_at_batch(lt, preset.shape, s, b, expected + 1)) ++expected;
    if (expected == 400) continue;  // too many to walk
    CAPTURE(k);
    CHECK(lt.max_batch(preset.shape, s, b) == expected);
  }
}

TEST_CASE("max_batch at the extremes") {
  const HfPeftPredictor hf;
  const ModelShape m = model("SmolLM2-135M");
  // Nothing fits: the weights alone are more than 1 MiB, and 0 is an exact budget too.
  CHECK(hf.max_batch(m, Step{}, Budget(1_MiB)) == 0);
  CHECK(hf.max_batch(m, Step{}, Budget(Bytes(0))) == 0);
  // Everything fits: the limit of validate(Step).
  CHECK(hf.max_batch(m, Step{.seq = 16}, unlimited) == batch_limit);
  // Tokens overflow before the batch limit: the largest that does not overflow and fits.
  check_max_batch_boundary(hf, m, Step{.seq = seq_limit}, unlimited);
  check_max_batch_boundary(hf, model("Mistral-7B-v0.1"), Step{.seq = seq_limit, .attention = Attention::math},
                           unlimited);
  // The batch in the step does not matter.
  CHECK(hf.max_batch(m, Step{.batch = 1000, .seq = 1024}, Budget(24_GiB)) ==
        hf.max_batch(m, Step{.batch = 1, .seq = 1024}, Budget(24_GiB)));
}

TEST_CASE("max_batch and max_seq solve a made-up affine term exactly") {
  // 1 GB fixed + 1000 B per token, no allocator margin: the largest batch is (budget - 1e9) / (1000 x seq).
  const Predictor<AffineTerm> p(AffineTerm{.fixed = 1000000000, .per_token = 1000}, no_margin);
  const ModelShape m = model("SmolLM2-135M");
  CHECK(p.max_batch(m, Step{.seq = 1000}, Budget(Bytes(1000000000 + 37 * 1000000 + 999999))) == 37);
  CHECK(p.max_batch(m, Step{.seq = 1000}, Budget(Bytes(1000000000 + 38 * 1000000))) == 38);
  CHECK(p.max_batch(m, Step{.seq = 1000}, Budget(Bytes(1000000000 + 999999))) == 0);
  CHECK(p.max_seq(m, Step{.batch = 4}, Budget(Bytes(1000000000 + 4 * 1000 * 12345))) == 12345);
  CHECK(p.max_seq(m, Step{.batch = 4}, Budget(Bytes(1000000000 + 4 * 1000 * 12345 - 1))) == 12344);
  CHECK(p.max_seq(m, Step{.batch = 4}, unlimited) == seq_limit);
}

TEST_CASE("max_batch still answers exactly for a term that is not affine in batch") {
  const ModelShape m = model("SmolLM2-135M");
  // 1000 B x batch^2: the largest batch within 1e8 B is floor(sqrt(1e5)) = 316.
  const Predictor<QuadraticInBatchTerm> quadratic(QuadraticInBatchTerm{.per_batch_squared = 1000}, no_margin);
  CHECK(quadratic.max_batch(m, Step{}, Budget(Bytes(100000000))) == 316);
  CHECK(quadratic.max_batch(m, Step{}, Budget(Bytes(316 * 316 * 1000 - 1))) == 315);
  // 2^63 B x batch^2 overflows at batch 2: batch 1 is the answer.
  const Predictor<QuadraticInBatchTerm> overflowing(QuadraticInBatchTerm{.per_batch_squared = 1ULL << 63}, no_margin);
  CHECK(overflowing.max_batch(m, Step{}, unlimited) == 1);
}

TEST_CASE("max_seq at the extremes") {
  const HfPeftPredictor hf;
  const ModelShape m = model("SmolLM2-135M");
  CHECK(hf.max_seq(m, Step{}, Budget(1_MiB)) == 0);
  CHECK(hf.max_seq(m, Step{.batch = 1}, unlimited) == seq_limit);
  // The score matrices of the math backend overflow long before 2^24 at a large batch.
  check_max_seq_boundary(hf, m, Step{.batch = batch_limit, .attention = Attention::math}, unlimited);
  CHECK(hf.max_seq(m, Step{.batch = batch_limit, .attention = Attention::math}, unlimited) < seq_limit);
}

TEST_CASE("max_batch and max_seq validate what they do not search") {
  const HfPeftPredictor hf;
  const ModelShape m = model("SmolLM2-135M");
  CHECK_THROWS_AS((void)hf.max_batch(m, Step{.seq = 0}, unlimited), InvalidInput);
  CHECK_THROWS_AS((void)hf.max_seq(m, Step{.batch = 0}, unlimited), InvalidInput);
  CHECK_THROWS_AS((void)hf.max_batch(m, Step{.lora = {.rank = 0}}, unlimited), InvalidInput);
  ModelShape bad = m;
  bad.kv_heads = 2;  // does not divide 9
  CHECK_THROWS_AS((void)hf.max_batch(bad, Step{}, unlimited), InvalidInput);
}

TEST_CASE("a user-defined term swaps into a Predictor") {
  using Stack = profiles::HfPeft;
  using Fused = Predictor<ParameterTerm<Stack>, ActivationTerm<Stack>, FusedLossTerm, WorkspaceTerm<Stack>,
                          AllocatorSlackTerm<Stack>>;
  static_assert(CostTerm<FusedLossTerm>);

  const ModelShape m = model("Qwen2.5-0.5B");
  const Step s{.batch = 2, .seq = 4096};
  const Prediction standard = HfPeftPredictor{}.predict(m, s);
  const Prediction fused = Fused{}.predict(m, s);

  CHECK(fused.terms[2].name == "fused loss");
  CHECK(fused.stack == "hf-peft");  // named by the first term that has a profile
  for (Phase phase : all_phases) {
    CAPTURE(to_string(phase));
    // Same parameters, activations, workspace; the fused loss in place of the logits.
    CHECK(fused.phases[phase] + standard.terms[2].bytes[phase] == standard.phases[phase] + fused.terms[2].bytes[phase]);
  }
  CHECK(fused.terms[2].bytes[Phase::loss_backward].count() == 8 * 2 * 4096);
  CHECK(fused.peak < standard.peak);
  // Without the 151936-wide logits, the long-sequence peak leaves the loss.
  CHECK(standard.phase == Phase::loss_backward);
  CHECK(fused.phase != Phase::loss_backward);
  // And the answers that depend on it follow: more batch fits.
  CHECK(Fused{}.max_batch(m, s, Budget(24_GiB)) > HfPeftPredictor{}.max_batch(m, s, Budget(24_GiB)));
}

TEST_CASE("a Predictor of one stateful term, with its own margin") {
  const ModelShape m = model("SmolLM2-135M");
  const Predictor<AffineTerm> p(AffineTerm{.fixed = 1000, .per_token = 3}, AllocatorMargin{.per_mille = 100, .fixed = 7});
  const Prediction got = p.predict(m, Step{.batch = 2, .seq = 50});
  CHECK(got.term_count == 1);
  CHECK(got.terms[0].name == "affine");
  CHECK(got.stack.empty());  // no term names a profile
  CHECK(got.peak.count() == 1000 + 3 * 100);
  CHECK(got.phase == Phase::forward);  // every phase ties: the first wins
  CHECK(got.required.count() == 1300 + (1300 / 1000 + 1) * 100 + 7);
  CHECK(p.margin().per_mille == 100);
}
