// estimate.hpp's searches and verdicts: max_batch and max_seq say when their answer is the search's own limit;
// a verdict that depends on where segments are placed says so (fits_fresh_process).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  // A limit below the answer (a config's sliding window less one): the answer is the limit, capped.
  const SearchResult windowed = max_seq(m, Step{.batch = 2}, Budget(24_GiB), Stack::hf_peft, {}, seq.value / 2);
  CHECK(windowed.value == seq.value / 2);
  CHECK(windowed.capped);
  CHECK(windowed.at.method == Method::allocator_simulation);
  CHECK_THROWS_WITH_AS(max_seq(m, Step{.batch = 2}, Budget(24_GiB), Stack::hf_peft, {}, 0),
                       "seq limit: must be between 1 and 16777216, got 0", InvalidInput);
  // Nothing fits: 0, not capped.
  const SearchResult none = max_batch(m, Step{}, Budget(1_MiB));
  CHECK(none.value == 0);
  CHECK_FALSE(none.capped);
}

// Every estimate says where its stack was recorded (the step-program file's own record, and the
// file) and, on several ranks, that nothing there is validated on several GPUs.
TEST_CASE("an estimate carries its provenance; several ranks are flagged as not validated") {
  const ModelShape m = preset("SmolLM2-135M");
  const ProgramSet& hf = *builtin_programs("hf-peft").set;
  const Estimate one = estimate(m, Step{.seq = 1024});
  CHECK(one.provenance.gpu == hf.gpu);
  CHECK(one.provenance.software == hf.software);
  CHECK(one.provenance.programs == hf.source);
  CHECK(hf.source.ends_with("hf-peft.programs"));
  CHECK(one.provenance.unvalidated.empty());
  CHECK(basis(one).starts_with("allocator simulation; hf-peft as recorded on " + hf.gpu));
  const Estimate probe = estimate(m, Step{.seq = 1024}, Stack::libtorch);
  CHECK(probe.provenance.software == builtin_programs("libtorch").set->software);
  // The closed form: the profile's record, no program file.
  const Estimate closed = estimate(m, Step{.seq = 100});
  CHECK(closed.method == Method::closed_form);
  CHECK(closed.provenance.programs.empty());
  CHECK(closed.provenance.software == profiles::HfPeft::recorded_software);

  const Estimate fsdp = estimate(m, Step{.mode = Mode::full, .world_size = 4, .sharding = Sharding::full});
  CHECK(fsdp.provenance.unvalidated.find("not validated on several GPUs") != std::string_view::npos);
  CHECK(fsdp.provenance.unvalidated.find("upper bound") == std::string_view::npos);
  CHECK(basis(fsdp).ends_with(fsdp.provenance.unvalidated));
  // DeepSpeed in bf16 keeps an fp32 master copy that is not counted: not an upper bound.
  const Step zero2{.mode = Mode::full, .world_size = 8, .sharding = Sharding::zero2};
  CHECK(estimate(m, zero2).provenance.unvalidated.find("not an upper bound") != std::string_view::npos);
  Step zero2_fp32 = zero2;
  zero2_fp32.precision = Precision::fp32;
  CHECK(sharding_caveat(zero2_fp32).find("upper bound") == std::string_view::npos);
  CHECK(provenance(Stack::hf_peft, zero2).unvalidated == sharding_caveat(zero2));
}

TEST_CASE("the Trainer's settings belong to the hf-trainer stack, which simulates its built-in kinds and bounds the rest") {
  const ModelShape m = preset("SmolLM2-135M");
  const Step accumulating{.seq = 1024, .grad_accum = 4};
  const Step mixed{.seq = 1024, .mode = Mode::full, .weights = Precision::fp32};
  for (const Stack s : {Stack::hf_peft, Stack::libtorch}) {
    CHECK_THROWS_WITH_AS(estimate(m, accumulating, s), doctest::Contains("grad accum: gradient accumulation"),
                         InvalidInput);
    CHECK_THROWS_WITH_AS(estimate(m, mixed, s), doctest::Contains("weights: fp32 weights under autocast"),
                         InvalidInput);
  }
  const Estimate e = estimate(m, accumulating, Stack::hf_trainer);
  CHECK(e.method == Method::closed_form);
  CHECK(e.no_simulation == "recorded with gradient accumulation 1 only");
  CHECK(e.provenance.software == profiles::HfTrainer::recorded_software);
  CHECK(e.peak == e.closed_form.peak);
  CHECK(estimate(m, mixed, Stack::hf_trainer).peak > estimate(m, Step{.seq = 1024, .mode = Mode::full}, Stack::hf_trainer).peak);
  CHECK_THROWS_WITH_AS(estimate(m, Step{.mode = Mode::full, .world_size = 2}, Stack::hf_trainer),
                       doctest::Contains("world size: the hf-trainer stack is modelled on one GPU"), InvalidInput);
  CHECK(parse_stack("hf-trainer") == Stack::hf_trainer);
  // The Trainer empties the cache before its first step (accelerator.free_memory()); the plain loop
  // does only where the context says so.
  CHECK(detail::cache_emptied_after_build(Stack::hf_trainer, RunContext{}));
  CHECK(!detail::cache_emptied_after_build(Stack::hf_peft, RunContext{}));
  // A kind its built-in programs hold is simulated: full fine-tuning, bf16 weights, fused AdamW.
  const Estimate simulated =
      estimate(m, Step{.seq = 1024, .mode = Mode::full, .optimizer = Optimizer::adamw_fused}, Stack::hf_trainer);
  CHECK(simulated.method == Method::allocator_simulation);
  CHECK(simulated.peak <= simulated.closed_form.peak);
  // Its programs, when a caller brings some, must be its own.
  RunContext c;
  c.programs = builtin_programs("hf-peft").set;
  CHECK_THROWS_AS(estimate(m, accumulating, Stack::hf_trainer, c), InvalidInput);
}

// RunContext::simulation_threads: a caller that runs estimates in parallel itself can keep each
// simulation on its own thread; the figures are the same on any number of threads.
TEST_CASE("an estimate's figures do not depend on its simulation threads") {
  CHECK(detail::simulation_threads(1) == 1);
  CHECK(detail::simulation_threads(3) == 3);
  CHECK(detail::simulation_threads(100) == 8);
  CHECK(detail::simulation_threads(0) >= 1);
  CHECK(detail::simulation_threads(0) <= 8);
  const ModelShape m = *find_preset("SmolLM2-135M");
  const Step s{.batch = 2, .seq = 1024};
  RunContext many, one;
  one.simulation_threads = 1;
  many.budget = one.budget = 6_GiB;
  const Estimate a = estimate(m, s, Stack::hf_peft, many), b = estimate(m, s, Stack::hf_peft, one);
  REQUIRE(a.method == Method::allocator_simulation);
  CHECK(a.peak == b.peak);
  CHECK(a.required == b.required);
  CHECK(a.simulation->reserved == b.simulation->reserved);
  CHECK(a.verdict->fits == b.verdict->fits);
  CHECK(a.verdict->reserved_peak == b.verdict->reserved_peak);
  CHECK(fit_verdict(m, s, Budget(6_GiB), Stack::hf_peft, one).reserved_peak == a.verdict->reserved_peak);
}

// Trials 17 to 20 of trials_13_libtorch_rerun.jsonl (fresh processes, the probe under 24 GiB): batches
// 6 to 8 ran, 9 ran out. At 8 the placements a fresh process gets run (their reserved peak is the
// measured 25,537,019,904 B) and ascending and most scattered ones run out: borderline.
TEST_CASE("a run that fits in a fresh process but not at every segment placement is borderline") {
  const ModelShape m = *find_preset("Llama-3.2-1B");
  Step s;
  s.batch = 8;
  s.mode = Mode::full;
  s.gradient_checkpointing = true;
  const Budget budget(24_GiB);
  const BudgetVerdict v = fit_verdict(m, s, budget, Stack::libtorch);
  REQUIRE(v.method == Method::allocator_simulation);
  CHECK_FALSE(v.fits);
  CHECK(v.fits_fresh_process);
  CHECK(v.reserved_peak_fresh_process == Bytes(25537019904ULL));
  REQUIRE(v.oom.has_value());  // where another placement ran out
  CHECK(v.reserved_peak >= v.reserved_peak_fresh_process);
  const SearchResult found = max_batch(m, s, budget, Stack::libtorch);
  CHECK(found.value == 7);
  CHECK(found.borderline_above == std::vector<std::uint64_t>{8});
  for (const auto& [batch, fresh] : {std::pair{7ULL, true}, std::pair{9ULL, false}}) {
    CAPTURE(batch);
    s.batch = batch;
    const BudgetVerdict w = fit_verdict(m, s, budget, Stack::libtorch);
    CHECK(w.fits == fresh);
    CHECK(w.fits_fresh_process == fresh);
  }
  // The closed form has no placements: both verdicts are `required` within the budget.
  s.precision = Precision::fp32;
  for (const Budget b : {Budget(1_GiB), huge}) {
    const BudgetVerdict c = fit_verdict(m, s, b, Stack::libtorch);
    REQUIRE(c.method == Method::closed_form);
    CHECK(c.fits == c.fits_fresh_process);
  }
}

// With expandable segments placement does not matter: one run, which is the fresh process's too.
TEST_CASE("with expandable segments the one placement decides both verdicts") {
  CHECK(detail::fresh_process_placements(true) == 1);
  CHECK(detail::fresh_process_placements(false) == 6);  // descending and the driver's at five headrooms
  const ModelShape m = *find_preset("SmolLM2-135M");
  Step s;
  s.batch = 10;
  s.seq = 4096;
  s.gradient_checkpointing = true;
  RunContext c;
  c.alloc_conf.expandable_segments = true;
  for (const Bytes b : {Bytes(4_GiB), Bytes(40_GiB)}) {
    const BudgetVerdict v = fit_verdict(m, s, Budget(b), Stack::hf_peft, c);
    REQUIRE(v.method == Method::allocator_simulation);
    CHECK(v.fits == v.fits_fresh_process);
    CHECK(v.reserved_peak == v.reserved_peak_fresh_process);
  }
}
