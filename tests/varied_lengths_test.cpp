// Loops of varied lengths (issue 13, dynamic padding): `estimate_varied_lengths` against the facts
// it must keep (a loop of one length is the fixed-shape simulation; the bound covers the fixed
// shape and every simulated loop, grows with S), and the measured loops replayed
// (hf_harness.py --trials on tests/validation/loops_13.json). Derivation:
// tests/validation/README.md#varied-lengths
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramfit/alloc_conf.hpp"
#include "vramfit/estimate.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/detail/replay.hpp"

using namespace vramfit;
using namespace vramfit::literals;

namespace {
// The files of measured loops (trial rows with "lengths"; hf_harness.py --trials on
// tests/validation/loops_13.json, on an H100). The rerun repeats, alone on the card, the loops that
// ran out of the card's memory rather than the budget (other trials held it); those rows are not
// replayed. The 80 GiB loops, whose limit the 80 GB card could not give, ran on the H200 (_h200).
constexpr std::array<const char*, 3> loop_files{"loops_13.jsonl", "loops_13_rerun.jsonl", "loops_13_h200.jsonl"};

Step lora_step(std::uint64_t batch, std::uint64_t seq) {
  Step s;
  s.batch = batch;
  s.seq = seq;
  s.lora.targets = TargetSet::attention();
  return s;
}

// Lengths as a loop with pad_to_multiple_of=64 draws them (tests/validation/make_loops.py): a
// multiple of 64 in [S/8, S], one step at S.
std::vector<std::uint64_t> drawn_lengths(std::uint64_t seq, std::size_t steps, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint64_t> pick(std::max<std::uint64_t>(1, seq / 512), seq / 64);
  std::vector<std::uint64_t> out;
  for (std::size_t k = 0; k < steps; ++k) out.push_back(64 * pick(rng));
  out[steps / 2] = seq;
  return out;
}

// One measured loop (a trial row with lengths) through `estimate_varied_lengths` with its budget,
// settings and the lengths it ran; the checks the Done-when line asks.
struct LoopCounts {
  std::size_t loops = 0, limited = 0;
  double most = 0, most_loop = 0;  // bound / measured, loop simulated / measured, where the loop ran
};
void replay_loop(const nlohmann::json& row, const std::string& where, LoopCounts& counts) {
  const std::string outcome = row.at("outcome").get<std::string>();
  REQUIRE_MESSAGE((outcome == "ok" || outcome == "oom"), where << ": outcome " << outcome);
  const ModelShape shape = detail::shape_from(row, where);
  const Step step = detail::step_from(row, where, true);
  const std::uint64_t total = row.at("gpu_total_memory").get<std::uint64_t>();
  RunContext c;
  c.budget = Bytes(memory_fraction_limit(total, row.at("fraction").get<double>()));
  if (row.contains("context_allocated") && row.at("context_allocated").is_number())
    c.held_before = Bytes(row.at("context_allocated").get<std::uint64_t>());
  if (row.at("alloc_conf").is_string()) c.alloc_conf = parse_alloc_conf(row.at("alloc_conf").get<std::string>(), "alloc_conf");
  VariedLengths loop;
  const auto& realised = row.at("realised_lengths");
  loop.lengths = (realised.is_array() ? realised : row.at("lengths")).get<std::vector<std::uint64_t>>();
  const VariedLengthsEstimate e = estimate_varied_lengths(shape, step, loop, Stack::hf_peft, c);
  CHECK_MESSAGE(e.method == Method::allocator_simulation, where << ": " << e.longest.no_simulation);
  const bool ok = outcome == "ok";
  const auto& measured = ok ? row.at("allocated_peak") : row.at("peak_at_error");
  REQUIRE_MESSAGE(measured.is_number(), where);
  const std::uint64_t peak = measured.get<std::uint64_t>();
  const double ratio = static_cast<double>(e.peak.count()) / static_cast<double>(peak);
  CHECK_MESSAGE(e.peak.count() >= peak, where << ": bound " << e.peak.count() << " < measured " << peak);
  if (ok) {  // an OOM's peak stops short of the loop's
    // With its lengths, the loop simulated: at least the measured peak and within 3% of it.
    REQUIRE_MESSAGE(e.loop.has_value(), where);
    const double loop_ratio = static_cast<double>(e.loop->peak.count()) / static_cast<double>(peak);
    CHECK_MESSAGE(e.loop->peak.count() >= peak, where << ": loop simulated " << e.loop->peak.count() << " < measured " << peak);
    CHECK_MESSAGE(loop_ratio <= 1.03, where << ": loop simulated / measured " << loop_ratio);
    // Without them, the bound over every loop up to S: within 5% (the bound's aim, issue 13 item 7;
    // it passes 3% on two loops, tests/validation/README.md#varied-lengths says why).
    CHECK_MESSAGE(ratio <= 1.05, where << ": bound / measured " << ratio);
    counts.most = std::max(counts.most, ratio);
    counts.most_loop = std::max(counts.most_loop, loop_ratio);
  }
  // Under a limit (a budget below the card: the fraction is not clamped), the simulated loop's verdict.
  if (row.at("budget_bytes").get<std::uint64_t>() < total) {
    REQUIRE(e.verdict.has_value());
    CHECK_MESSAGE(e.verdict->fits == ok, where);
    ++counts.limited;
  }
  // The loop simulated with its lengths (no bound: the placements' largest peak), for comparison.
  const double simulated = e.loop ? static_cast<double>(e.loop->peak.count()) / static_cast<double>(peak) : 0.0;
  fmt::print("  {} {:<60} {:>4}  bound {:>15} / measured {:>15} = {:.4f} (loop simulated: {:.4f})  verdict {}\n",
             where, row.at("case").get<std::string>(), outcome, e.peak.count(), peak, ratio, simulated,
             e.verdict ? (e.verdict->fits ? "fits" : "oom") : "-");
  ++counts.loops;
}
}  // namespace

TEST_CASE("varied lengths: a loop of one length is the fixed-shape simulation") {
  const ModelShape m = preset("SmolLM2-135M");
  const Step s = lora_step(2, 1024);
  for (const bool expandable : {false, true}) {
    CAPTURE(expandable);
    RunContext c;
    c.alloc_conf.expandable_segments = expandable;
    const VariedLengthsEstimate e = estimate_varied_lengths(m, s, {{1024, 1024}}, Stack::hf_peft, c);
    REQUIRE(e.loop.has_value());
    CHECK(e.method == Method::allocator_simulation);
    CHECK(e.loop->peak == e.longest.peak);
    CHECK(e.longest.peak == estimate(m, s, Stack::hf_peft, c).peak);
    CHECK(e.peak >= e.loop->peak);
  }
}

TEST_CASE("varied lengths: the bound covers the fixed shape and every simulated loop, and grows with S") {
  const ModelShape m = preset("SmolLM2-135M");
  for (const Mode mode : {Mode::lora, Mode::full}) {
    CAPTURE(mode == Mode::lora);
    Step s = lora_step(2, 2048);
    s.mode = mode;
    const VariedLengthsEstimate any = estimate_varied_lengths(m, s);
    CHECK_FALSE(any.loop.has_value());
    CHECK(any.peak >= any.longest.peak);
    for (unsigned seed = 1; seed <= 3; ++seed) {
      CAPTURE(seed);
      const VariedLengthsEstimate e = estimate_varied_lengths(m, s, {drawn_lengths(s.seq, 8, seed)});
      REQUIRE(e.loop.has_value());
      CHECK(e.peak == any.peak);  // the bound does not depend on the lengths given
      CHECK(e.loop->peak <= e.peak);
      CHECK(e.loop->reserved_peak >= e.loop->peak);
    }
    Step shorter = s;
    shorter.seq = 1024;
    CHECK(estimate_varied_lengths(m, shorter).peak <= any.peak);
  }
}

TEST_CASE("varied lengths: with expandable segments no block holds slack, so the bound is the fixed shape's peak") {
  // c10's should_split with expandable segments splits whenever 512 B remain; the LoRA program's
  // sizes are products (largest at S), so nothing can exceed the fixed-shape simulation.
  const ModelShape m = preset("SmolLM2-135M");
  const Step s = lora_step(4, 2048);
  RunContext c;
  c.alloc_conf.expandable_segments = true;
  const VariedLengthsEstimate e = estimate_varied_lengths(m, s, {}, Stack::hf_peft, c);
  CHECK(e.peak == e.longest.peak);
}

TEST_CASE("varied lengths: a budget decides by the simulated loop; bad lengths name the field") {
  const ModelShape m = preset("SmolLM2-135M");
  const Step s = lora_step(2, 1024);
  const VariedLengthsEstimate free_run = estimate_varied_lengths(m, s, {{512, 1024, 768}});
  REQUIRE(free_run.loop.has_value());
  RunContext roomy;
  roomy.budget = free_run.loop->reserved_peak + Bytes(256_MiB);
  const VariedLengthsEstimate fits = estimate_varied_lengths(m, s, {{512, 1024, 768}}, Stack::hf_peft, roomy);
  REQUIRE(fits.verdict.has_value());
  CHECK(fits.verdict->fits);
  CHECK(fits.verdict->method == Method::allocator_simulation);
  RunContext tight;
  tight.budget = free_run.loop->peak - Bytes(64_MiB);
  const VariedLengthsEstimate oom = estimate_varied_lengths(m, s, {{512, 1024, 768}}, Stack::hf_peft, tight);
  REQUIRE(oom.verdict.has_value());
  CHECK_FALSE(oom.verdict->fits);
  REQUIRE(oom.verdict->oom.has_value());
  CHECK(oom.verdict->oom->step >= 1);
  // Without lengths: the fixed shape's verdict, and never "fits" with the bound above the budget.
  RunContext below_bound;
  below_bound.budget = free_run.peak - Bytes(1);
  const VariedLengthsEstimate any = estimate_varied_lengths(m, s, {}, Stack::hf_peft, below_bound);
  REQUIRE(any.verdict.has_value());
  CHECK_FALSE(any.verdict->fits);

  const std::vector<std::uint64_t> too_many(VariedLengths::max_steps + 1, 512);
  for (const std::vector<std::uint64_t>& bad : {std::vector<std::uint64_t>{0}, std::vector<std::uint64_t>{1025}, too_many}) {
    CHECK_THROWS_WITH_AS(estimate_varied_lengths(m, s, {bad}), doctest::Contains("lengths"), InvalidInput);
  }
}

TEST_CASE("varied lengths: where no program applies, the closed form's bound") {
  const ModelShape m = preset("SmolLM2-135M");
  Step s = lora_step(2, 1024);
  s.precision = Precision::fp32;
  const VariedLengthsEstimate e = estimate_varied_lengths(m, s, {{512, 1024}});
  CHECK(e.method == Method::closed_form);
  CHECK(e.peak == e.longest.closed_form.peak);
  CHECK_FALSE(e.loop.has_value());
}

TEST_CASE("varied lengths: a fixed-shape trial, replayed as a loop of three steps at S, meets its measured peak") {
  // The measured trials ran three steps of one length: the loop machinery (the batch made again
  // before each step) must give the same verdicts and a bound above the measured peaks.
  const std::string path = std::string(VRAMFIT_TEST_DATA_DIR) + "/trials_13.jsonl";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, path);
  std::string text;
  std::size_t line = 0, replayed = 0;
  LoopCounts counts;
  while (std::getline(in, text)) {
    ++line;
    nlohmann::json row = detail::parse_row(text, path);
    if (row.value("kind", "") != "trial" || !row.at("alloc_conf").is_string()) continue;  // expandable: one placement
    const std::uint64_t seq = row.at("seq").get<std::uint64_t>();
    row["realised_lengths"] = {seq, seq, seq};
    replay_loop(row, fmt::format("trials_13.jsonl:{}", line), counts);
    ++replayed;
  }
  CHECK(replayed >= 10);
  CHECK(counts.limited == replayed);
}

TEST_CASE("varied lengths: every measured loop's allocated peak is within the loop simulated (3%) and the bound "
          "(5%), and its OK / OOM the simulated loop's verdict") {
  LoopCounts counts;
  std::size_t device_ooms = 0;
  for (const char* name : loop_files) {
    const std::string path = std::string(VRAMFIT_TEST_DATA_DIR) + "/" + name;
    std::ifstream in(path);
    REQUIRE_MESSAGE(in, path);
    std::string text;
    std::size_t line = 0;
    fmt::print("{}: loop, case, outcome: bound / measured allocated peak; simulated verdict\n", name);
    while (std::getline(in, text)) {
      ++line;
      const std::string where = fmt::format("{}:{}", name, line);
      const nlohmann::json row = detail::parse_row(text, where);
      if (row.value("kind", "") != "trial" || !row.contains("lengths") || !row.at("lengths").is_array()) continue;
      if (detail::ran_out_of_card(row)) {
        ++device_ooms;
        continue;
      }
      replay_loop(row, where, counts);
    }
  }
  fmt::print("loops: {} replayed ({} under a limit; {} that ran out of the card's memory not replayed); largest "
             "bound / measured of the loops that ran: {:.4f}; loop simulated / measured: {:.4f}\n",
             counts.loops, counts.limited, device_ooms, counts.most, counts.most_loop);
  CHECK(counts.loops >= 13);
}
