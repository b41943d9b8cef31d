// vramfit::estimate on a shape and step decoded from the fuzz bytes (dimensions in realistic
// ranges, so that the simulation's cost stays bounded; the closed form's full ranges are the
// JSON schema target's): InvalidInput or Overflow, or an estimate whose peak is within
// `required` and agrees with its closed form and simulation; and the largest batch (the closed
// form's and estimate's) fits the budget where the next batch does not.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <fuzzer/FuzzedDataProvider.h>
#include <nlohmann/json.hpp>

#include "vramfit/estimate.hpp"
#include "vramfit/json.hpp"
#include "fuzz.hpp"

namespace {

using vramfit::fuzz::attempt;
using vramfit::fuzz::check;

vramfit::ModelShape decode_shape(FuzzedDataProvider& in) {
  vramfit::ModelShape m;
  m.heads = in.ConsumeIntegralInRange<std::uint64_t>(1, 64);
  m.kv_heads = in.ConsumeIntegralInRange<std::uint64_t>(1, m.heads);
  if (in.ConsumeBool())
    while (m.heads % m.kv_heads != 0) --m.kv_heads;  // mostly a divisor: validate refuses the rest
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: m.hidden = m.heads * in.ConsumeIntegralInRange<std::uint64_t>(1, 256); break;  // head_dim derived
    case 1: m.head_dim = 64; break;
    case 2: m.head_dim = 128; break;
    default: m.head_dim = in.ConsumeIntegralInRange<std::uint64_t>(0, 512); break;
  }
  if (m.hidden == 0) m.hidden = in.ConsumeIntegralInRange<std::uint64_t>(1, 16384);
  m.intermediate = in.ConsumeIntegralInRange<std::uint64_t>(1, 65536);
  m.vocab = in.ConsumeIntegralInRange<std::uint64_t>(1, 1ULL << 18);
  // The simulation's cost grows with the layers: mostly a few, at times a real model's count.
  m.layers = in.ConsumeIntegralInRange<std::uint64_t>(1, in.ConsumeIntegralInRange<int>(0, 7) == 0 ? 48 : 6);
  m.tied_embeddings = in.ConsumeBool();
  m.qkv_bias = in.ConsumeBool();
  m.gated_mlp = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  m.qk_norm = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  return m;
}

vramfit::Step decode_step(FuzzedDataProvider& in) {
  using namespace vramfit;
  Step s;
  s.batch = in.ConsumeIntegralInRange<std::uint64_t>(0, 24);
  s.seq = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint64_t>(0, 20000) : 256 * in.ConsumeIntegralInRange<std::uint64_t>(1, 16);
  s.precision = static_cast<Precision>(in.ConsumeIntegralInRange<int>(0, 2));
  s.mode = in.ConsumeBool() ? Mode::lora : Mode::full;
  s.lora.rank = in.ConsumeIntegralInRange<std::uint64_t>(0, 256);
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: s.lora.targets = TargetSet::peft_default(); break;
    case 1: s.lora.targets = TargetSet::attention(); break;
    case 2: s.lora.targets = TargetSet::all_linear(); break;
    default: s.lora.targets.bits = in.ConsumeIntegralInRange<std::uint8_t>(0, 127); break;
  }
  s.gradient_checkpointing = in.ConsumeBool();
  s.attention = static_cast<Attention>(in.ConsumeIntegralInRange<int>(0, 2));
  s.logits_retained = in.ConsumeBool();
  s.peak_over = in.ConsumeBool() ? PeakOver::steady : PeakOver::first_step;
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {  // a quarter of the steps on several ranks
    s.world_size = in.ConsumeIntegralInRange<std::uint64_t>(0, 64);
    s.sharding = static_cast<Sharding>(in.ConsumeIntegralInRange<int>(0, 4));
    s.shard_group = in.ConsumeIntegralInRange<std::uint64_t>(0, 64);
    if (s.sharding != Sharding::hybrid && in.ConsumeBool()) s.shard_group = 0;
  }
  // The optimizer, LoRA dropout, and the Trainer's accumulation and weights' dtype (refused by the
  // stacks that do not model them).
  s.optimizer = static_cast<Optimizer>(in.ConsumeIntegralInRange<int>(0, 4));
  if (in.ConsumeBool()) s.lora.dropout = 0.05;
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) s.grad_accum = in.ConsumeIntegralInRange<std::uint64_t>(0, 9);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) s.weights = static_cast<Precision>(in.ConsumeIntegralInRange<int>(0, 2));
  return s;
}

/// Whether `step` at `batch` fits the budget by `fits` (an Overflow: it does not).
template <class F>
bool fits_at(vramfit::Step step, std::uint64_t batch, F&& fits) {
  step.batch = batch;
  try {
    return fits(step);
  } catch (const vramfit::Overflow&) {
    return false;
  }
}

template <class Definition>
void check_estimate(const vramfit::ModelShape& m, const vramfit::Step& s, vramfit::Stack stack, vramfit::Budget budget,
                    bool search) {
  using namespace vramfit;
  const typename Definition::predictor predictor;
  // Arguments that pass validate (and the stack's own checks) get an estimate or an Overflow, never
  // an InvalidInput.
  const bool valid = vramfit::fuzz::accepts([&] { validate(m), validate(s, m), detail::validate_for_stack(m, s, stack); });
  const auto run = [&] { return estimate(m, s, stack); };
  const auto e = valid ? vramfit::fuzz::attempt_valid(run) : attempt(run);
  if (e) {
    check(e->stack == stack, "the estimate's stack is the one asked for");
    check(e->peak <= e->required, "peak <= required");
    check(e->closed_form.peak <= e->closed_form.required, "closed form: peak <= required");
    check(e->simulation.has_value() == (e->method == Method::allocator_simulation), "method names the path taken");
    check(e->no_simulation.empty() == e->simulation.has_value(), "no simulation says why");
    check(simulation_gap(m, s, stack) == e->no_simulation, "simulation_gap agrees with estimate");
    if (e->simulation) {
      const Simulation& sim = *e->simulation;
      check(e->peak == sim.peak, "the simulated peak is the peak");
      check(sim.first <= sim.steady, "the first step's peak is within the steady peak");
      check(sim.peak == (s.peak_over == PeakOver::first_step ? sim.first : sim.steady), "peak over the steps asked for");
      check(sim.requests > 0, "a simulation replays requests");
      check(sim.peak + simulated_margin(sim.peak) <= e->required, "required covers the simulated peak and margin");
      // The closed form's bound stays out of `required` with a simulation (estimate.hpp).
      check(typename Definition::expected_predictor{}.predict(m, s).required <= e->required,
            "required covers the expected figure");
    } else {
      check(e->peak == e->closed_form.peak && e->required == e->closed_form.required, "closed form only");
    }
  }

  // The closed form's largest batch: it fits, and the next one does not.
  const auto closed = attempt([&] { return predictor.max_batch(m, s, budget); });
  constexpr std::uint64_t limit = 1ULL << 20;
  const auto closed_fits = [&](const Step& at) { return predictor.predict(m, at).fits(budget); };
  if (closed) {
    check(*closed <= limit, "max_batch within its limit");
    if (*closed > 0) check(fits_at(s, *closed, closed_fits), "the closed form's max_batch fits");
    if (*closed < limit) check(!fits_at(s, *closed + 1, closed_fits), "the batch after max_batch does not fit");
  }
  if (!search || !closed) return;
  // The estimate's largest batch: it fits, and the next does not (the simulation's verdict may
  // answer above the closed form's: its margin is not the allocator's rule).
  const auto found = attempt([&] { return max_batch(m, s, budget, stack); });
  if (!found) return;
  const auto estimate_fits = [&](const Step& at) { return estimate(m, at, stack).fits(budget); };
  for (const std::uint64_t v : found->oom_below)
    check(v < found->value && !fits_at(s, v, estimate_fits), "oom_below lists smaller batches that do not fit");
  check(found->capped == (*closed >= limit), "capped when the closed form reaches the limit");
  if (found->value > 0) check(found->at.fits(budget), "the estimate at max_batch fits");
  if (found->value < limit) check(!fits_at(s, found->value + 1, estimate_fits), "the batch after max_batch does not fit");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const vramfit::ModelShape m = decode_shape(in);
  const vramfit::Step s = decode_step(in);
  const auto stack = static_cast<vramfit::Stack>(in.ConsumeIntegralInRange<int>(0, 2));
  const bool search = in.ConsumeIntegralInRange<int>(0, 7) == 0;  // the search runs many estimates
  const vramfit::Budget budget(vramfit::Bytes(in.ConsumeIntegralInRange<std::uint64_t>(0, 1ULL << 41)));
  if (std::getenv("VRAMFIT_FUZZ_PRINT") != nullptr) {  // what an input decodes to, to reproduce a finding
    const nlohmann::json decoded = {{"shape", m}, {"step", s}, {"stack", std::string(vramfit::to_string(stack))},
                                    {"budget_bytes", budget.usable.count()}, {"search", search}};
    std::fprintf(stderr, "%s\n", decoded.dump().c_str());
  }
  vramfit::detail::visit_stack(stack, [&](auto definition) {
    check_estimate<decltype(definition)>(m, s, stack, budget, search);
  });
  return 0;
}
