#pragma once
/// @file estimate.hpp
/// The answer vramfit gives for a step, from one call: `estimate(model, step, stack)` runs the
/// closed form (the breakdown by term and phase) and, where a step program was recorded for the
/// step's kind, the allocator simulation, which is then the peak. Whether a run fits a budget is
/// decided by simulating the build and three steps under the allocator's limit where a program
/// applies (`RunContext::budget`, `Estimate::verdict`), else by `required` (the closed form's peak
/// plus margin). `max_batch` and `max_seq` answer by the same decision.
///
///     const vramfit::Estimate e = vramfit::estimate(vramfit::preset("Qwen2.5-0.5B"), step);
///     if (!e.fits(vramfit::Budget(23_GiB))) ...;  // e.peak, e.required, e.method, e.closed_form

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "vramfit/alloc_conf.hpp"
#include "vramfit/bytes.hpp"
#include "vramfit/format.hpp"
#include "vramfit/model.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/program_file.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/sharding.hpp"
#include "vramfit/step.hpp"
#include "vramfit/detail/enum_names.hpp"
#include "vramfit/detail/simulate.hpp"

namespace vramfit {

/// The software stack a step runs on: HF transformers + PEFT in a plain loop (`hf_peft`), the
/// Probe's LibTorch reference step (`libtorch`), or `transformers.Trainer` + PEFT (`hf_trainer`:
/// autocast, the Trainer's optimizers, gradient accumulation, mixed precision).
enum class Stack : std::uint8_t { hf_peft, libtorch, hf_trainer };

/// How the peak was obtained: the recorded step program through the allocator model, or the
/// closed-form terms alone (no program was recorded for this kind of step).
enum class Method : std::uint8_t { allocator_simulation, closed_form };

VRAMFIT_ENUM_NAMES(Stack, "stack", {Stack::hf_peft, "hf-peft"}, {Stack::hf_trainer, "hf-trainer"},
                   {Stack::libtorch, "libtorch"});
VRAMFIT_ENUM_NAMES(Method, "method",
                   {Method::allocator_simulation, "allocator simulation"}, {Method::closed_form, "closed form"});

constexpr std::string_view to_string(Stack s) { return detail::enum_name(s); }
constexpr std::string_view to_string(Method m) { return detail::enum_name(m); }
/// The stack named `text` ("hf-peft", "hf-trainer", "libtorch"); `InvalidInput` naming `field` otherwise.
inline Stack parse_stack(std::string_view text, std::string_view field = "stack") {
  return detail::parse_enum<Stack>(text, field);
}

/// The allocator simulation's figures (allocated bytes, weights and workspaces included).
struct Simulation {
  Bytes peak;                ///< over the steps the step asks for (`Step::peak_over`)
  Bytes first;               ///< over the first step
  Bytes steady;              ///< over the first and second steps
  Bytes after_build;         ///< allocated once the model and adapters are built
  Bytes reserved;            ///< segments the allocator holds at the end, with no budget to stay under
  std::string_view phase;    ///< where `peak` falls: forward, backward, optimizer, zero_grad
  std::size_t requests = 0;  ///< allocator requests replayed
};

/// What PyTorch's out-of-memory message reports at the request that did not fit, and where.
struct OutOfMemory {
  Bytes requested;             ///< the request, rounded to 512 B
  Bytes tried_to_allocate;     ///< the segment the allocator asked for ("Tried to allocate")
  Bytes allocated;             ///< "allocated by PyTorch"
  Bytes reserved_unallocated;  ///< "reserved by PyTorch but unallocated", after the caches were released
  Bytes limit;                 ///< "allowed"
  std::string_view phase;      ///< build, forward, backward, optimizer, zero_grad
  int step = 0;                ///< 1 to 3; 0: the build
};

/// Whether the run fits a budget: the simulated build and three steps under the allocator's
/// limit where a program applies, else the closed form's `required` within the budget.
struct BudgetVerdict {
  Bytes budget{};                   ///< what the caching allocator may reserve
  bool fits = false;  ///< simulation: at every segment placement simulated; closed form: required within
  /// Simulation: at every placement the GPU driver gives a fresh process (as the validation's
  /// trials ran). True where `fits` is false: whether the run fits depends on where segments are
  /// placed, as in a process that freed memory before its steps; the closed form: `fits`.
  bool fits_fresh_process = false;
  Method method = Method::closed_form;
  Bytes reserved_peak{};            ///< simulation: the most reserved over the steps (0 with the closed form)
  Bytes reserved_peak_fresh_process{};  ///< simulation: the same at the fresh process's placements
  bool pressed = false;             ///< simulation: the limit refused a segment (caches were released)
  std::optional<OutOfMemory> oom{}; ///< simulation: where it ran out of memory
};

/// How the process stood when the run began. The defaults are a fresh process, as users run it;
/// the replay of measurements sets what the harness's process held.
struct RunContext {
  /// Bytes allocated before the build. Default: the stack's own (hf-peft: the cuBLAS workspaces;
  /// libtorch: none, the Probe releases them). For hf-peft never less than the workspaces.
  std::optional<Bytes> held_before;
  bool cache_emptied_after_build = false;  ///< `torch.cuda.empty_cache()` between build and step 1
  /// Bytes the caching allocator may reserve (c10's allowed_memory_maximum: `memory_fraction_limit`
  /// of a fraction, or `Gpu::allocator_budget`); with it `estimate` decides whether the run fits.
  std::optional<Bytes> budget{};
  AllocConf alloc_conf{};  ///< PYTORCH_CUDA_ALLOC_CONF's settings (`parse_alloc_conf`)
  /// Threads one simulation runs its segment placements on: 0 the hardware's (at most 8), 1 the
  /// calling thread alone (for a caller that runs estimates in parallel itself). The figures do
  /// not depend on it.
  unsigned simulation_threads = 0;
  /// The step programs to simulate with (`load_programs`): null for the stack's built-in ones
  /// (`builtin_programs`). Their stack must be the estimate's.
  std::shared_ptr<const ProgramSet> programs{};
};

/// What `estimate` was asked, kept so an estimate can decide other budgets.
struct EstimateInputs {
  ModelShape model{};
  Step step{};
  RunContext context{};
};

/// Where an estimate's figures come from and how far they are checked: the GPU and software its
/// stack's step programs (and profile) were recorded on, and what is not validated.
struct Provenance {
  std::string gpu;              ///< "NVIDIA H200"
  std::string software;         ///< "torch 2.11.0+cu130, transformers 5.17.0, peft 0.21.0"
  std::string_view unvalidated; ///< empty on one GPU; else `sharding_caveat(step)`
  /// The step-program file the simulation ran (`ProgramSet::source`), whose record `gpu` and
  /// `software` then are; empty where no program ran (the profile's record).
  std::string programs;
};

/// One step's estimate: the peak, what a budget must cover, how it was obtained and why.
struct Estimate {
  Stack stack = Stack::hf_peft;
  Method method = Method::closed_form;
  Bytes peak;                            ///< allocated peak: the simulation's where one ran, else the closed form's
  Bytes required;                        ///< peak plus the allocator's margin, the larger of both methods'
  std::string_view phase;                ///< where `peak` falls (the closed form's `to_key` names, the simulation's)
  /// `phase` for text: "loss backward" where the key reads "loss_backward".
  [[nodiscard]] std::string phase_words() const {
    std::string words(phase);
    std::ranges::replace(words, '_', ' ');
    return words;
  }
  Prediction closed_form;                ///< the terms by phase: the breakdown, and the fallback
  std::optional<Simulation> simulation;  ///< where a program applies
  std::string_view no_simulation;        ///< why none applies (empty when one ran)
  Provenance provenance;                 ///< recorded on what, and what is not validated
  std::optional<BudgetVerdict> verdict{};  ///< under `RunContext::budget`, when one was given
  EstimateInputs inputs{};

  /// Whether the run fits `b`: the simulated build and three steps under that limit where a
  /// program applies (the verdict above when `b` is its budget), else `required` within it.
  [[nodiscard]] bool fits(Budget b) const;
  /// The verdict under `b` (simulated again unless `b` is the verdict's budget).
  [[nodiscard]] BudgetVerdict verdict_under(Budget b) const;
};

namespace detail {
/// A stack's closed form, recorded programs and process bytes: the one place a `Stack` value
/// becomes types.
template <StackProfile P>
struct StackDefinition {
  using predictor = StackPredictor<P>;
  /// The closed form with the slack a steady step of a fresh process is expected to leave, not its
  /// bound: below the bound, so its `max_batch` bounds the answer from above on both paths, and
  /// its `required` is what the simulation path keeps as its floor.
  /// Its margin is the simulation's (`simulated_margin`): it proposes candidates the simulation decides.
  struct expected_predictor
      : Predictor<ParameterTerm<P>, ActivationTerm<P>, LogitsTerm<P>, WorkspaceTerm<P>, ExpectedSlackTerm<P>> {
    constexpr expected_predictor()
        : Predictor<ParameterTerm<P>, ActivationTerm<P>, LogitsTerm<P>, WorkspaceTerm<P>, ExpectedSlackTerm<P>>(
              {}, {}, {}, {}, {}, simulated_margin) {}
  };
  static Provenance recorded() { return {std::string(P::recorded_gpu), std::string(P::recorded_software), {}, {}}; }
  /// Bytes the process holds outside the program. hf-peft: the cuBLAS workspaces (65 MiB), and
  /// with q/k/v bias and checkpointing 1 MiB more, the cuBLASLt workspace the autograd thread
  /// takes when the recomputed biased projections first run there (recorded in the traces).
  /// libtorch: none, the Probe releases the workspaces before the build and the program makes them.
  static Bytes held(const ModelShape& m, const Step& s, const RunContext& c) {
    if constexpr (std::is_same_v<P, profiles::LibTorch>) {
      return c.held_before.value_or(Bytes{});
    } else {
      const Bytes own(P::figures.workspace_bytes +
                      (m.qkv_bias && s.gradient_checkpointing ? P::figures.autograd_workspace_bytes : 0));
      return c.held_before ? max(*c.held_before, own) : own;
    }
  }
};

inline BudgetVerdict closed_form_verdict(Bytes required, Bytes budget) {
  return BudgetVerdict{.budget = budget, .fits = required <= budget, .fits_fresh_process = required <= budget,
                       .method = Method::closed_form};
}
inline BudgetVerdict to_verdict(const PlacementVerdict& v, Bytes budget) {
  BudgetVerdict out{.budget = budget, .fits = v.fits, .fits_fresh_process = v.fits_fresh_process,
                    .method = Method::allocator_simulation,
                    .reserved_peak = v.reserved_peak, .reserved_peak_fresh_process = v.reserved_peak_fresh_process,
                    .pressed = v.pressed};
  if (v.oom)
    out.oom = OutOfMemory{.requested = Bytes(v.oom->requested), .tried_to_allocate = Bytes(v.oom->tried_to_allocate),
                          .allocated = Bytes(v.oom->allocated),
                          .reserved_unallocated = Bytes(v.oom->reserved - v.oom->allocated),
                          .limit = Bytes(v.oom->limit), .phase = v.oom_phase, .step = v.oom_step};
  return out;
}

template <class F>
decltype(auto) visit_stack(Stack s, F&& f) {
  if (s == Stack::libtorch) return f(StackDefinition<profiles::LibTorch>{});
  if (s == Stack::hf_trainer) return f(StackDefinition<profiles::HfTrainer>{});
  return f(StackDefinition<profiles::HfPeft>{});
}

/// Whether the cache is emptied between the build and the first step: where the context says so,
/// and always in the Trainer's run (`_inner_training_loop` begins with `accelerator.free_memory()`,
/// accelerate's `release_memory`: gc.collect() and torch.cuda.empty_cache(); that is before the
/// first batch reaches the GPU, a few small requests the simulation makes before it empties).
constexpr bool cache_emptied_after_build(Stack stack, const RunContext& c) {
  return c.cache_emptied_after_build || stack == Stack::hf_trainer;
}

/// Throws `InvalidInput` for a step the stack does not run: gradient accumulation and mixed
/// precision are the Trainer's (hf-trainer), which runs on one GPU here; the LibTorch reference
/// step runs its own AdamW and no dropout.
inline void validate_for_stack(const ModelShape& m, const Step& s, Stack stack) {
  if (stack != Stack::hf_trainer) {
    detail::require_no_trainer_settings(s, to_string(stack));
  } else if (!s.single_gpu()) {
    throw InvalidInput("world size", "the hf-trainer stack is modelled on one GPU (world size 1, no sharding); "
                                     "hf-peft models several ranks");
  } else if (s.mode == Mode::full && s.weight_precision() == Precision::fp16) {
    // Under fp16 autocast (hf-trainer's fp16) the Trainer's GradScaler.unscale_ raises "Attempting
    // to unscale FP16 gradients." (torch/amp/grad_scaler.py) for fp16 weights that train.
    throw InvalidInput("weights", "the Trainer does not fine-tune fp16 weights in full (its grad scaler refuses "
                                  "fp16 grads): load fp32 weights (--weights fp32) under fp16 autocast");
  }
  if (!s.single_gpu() && s.optimizer == Optimizer::adafactor)
    throw InvalidInput("optim", "Adafactor is modelled on one GPU; on several ranks give adamw, adamw-fused or sgd");
  if (stack == Stack::libtorch) {
    if (s.lora_dropout())
      throw InvalidInput("lora dropout", "the libtorch stack's step (the Probe's reference step) runs no dropout");
    if (m.qk_norm)
      throw InvalidInput("qk_norm", "the libtorch stack's step (the Probe's reference step) has no q/k norms (Qwen3): "
                                    "give --stack hf-peft or hf-trainer");
    if (s.optimizer != Optimizer::adamw)
      throw InvalidInput("optim", "the libtorch stack's step (the Probe's reference step) runs torch::optim::AdamW only");
  }
}

/// The recorded program an estimate of this step simulates, from the context's programs or the
/// stack's built-in ones; `program` null (and `why`) where none applies.
struct ProgramChoice {
  const ProgramSet* set = nullptr;
  const StepProgram* program = nullptr;
};
inline ProgramChoice choose_program(const ModelShape& m, const Step& s, Stack stack, const RunContext& c,
                                    std::string_view& why) {
  ProgramChoice out;
  if (c.programs) {
    if (c.programs->stack != to_string(stack))
      throw InvalidInput("programs", fmt::format("{} holds step programs of {}; the estimate is of {}",
                                                 c.programs->source, c.programs->stack, to_string(stack)));
    out.set = c.programs.get();
  } else {
    const BuiltinPrograms& builtin = builtin_programs(to_string(stack));
    out.set = builtin.set.get();
    if (out.set == nullptr) {
      // The step's own reason where it has one (say, fp32), else the missing file's.
      why = outside_recorded_steps(m, s);
      if (why.empty()) why = builtin.why;
      return out;
    }
  }
  if (const ProgramEntry* e = find_entry(out.set->entries, m, s, why))
    out.program = &out.set->parsed[static_cast<std::size_t>(e - out.set->entries.data())];
  return out;
}
}  // namespace detail

/// The provenance of every estimate of `step` on `stack`: where the stack was recorded, and for
/// several ranks what is not validated.
inline Provenance provenance(Stack stack, const Step& step = {}) {
  Provenance p = detail::visit_stack(stack, [](auto def) { return decltype(def)::recorded(); });
  p.unvalidated = sharding_caveat(step);
  return p;
}

/// Why no recorded program applies to this model, step and stack; empty when one does.
inline std::string_view simulation_gap(const ModelShape& model, const Step& step, Stack stack = Stack::hf_peft) {
  std::string_view why;
  (void)detail::choose_program(model, step, stack, RunContext{}, why);
  return why;
}

namespace detail {
/// `estimate`; with `peaks` false and a program applying, only the verdict under the budget is
/// simulated (`simulation` stays empty, `peak` and `required` are the closed form's): what a
/// search needs of most values it tries. `known`: the verdict an earlier call gave these inputs.
inline Estimate estimate_run(const ModelShape& model, const Step& step, Stack stack, const RunContext& context,
                             bool peaks, const BudgetVerdict* known = nullptr) {
  validate_for_stack(model, step, stack);
  return detail::visit_stack(stack, [&](auto def) {
    using Definition = decltype(def);
    const typename Definition::predictor predictor;
    Estimate out;
    out.stack = stack;
    out.provenance = provenance(stack, step);
    out.inputs = EstimateInputs{model, step, context};
    out.closed_form = predictor.predict(model, step);
    out.peak = out.closed_form.peak;
    out.required = out.closed_form.required;
    out.phase = to_key(out.closed_form.phase);
    const detail::ProgramChoice chosen = detail::choose_program(model, step, stack, context, out.no_simulation);
    if (chosen.program == nullptr) {
      if (context.budget) out.verdict = detail::closed_form_verdict(out.required, *context.budget);
      return out;
    }
    const detail::StepProgram& program = *chosen.program;
    out.provenance.gpu = chosen.set->gpu;
    out.provenance.software = chosen.set->software;
    out.provenance.programs = chosen.set->source;
    const detail::ProgramOps ops = program.resolve(detail::program_dims(model, step), model.layers);
    const Bytes held = Definition::held(model, step, context);
    const detail::PlacementPeaks p =
        peaks ? detail::simulate_placements(ops, step, held, detail::cache_emptied_after_build(stack, context), context.alloc_conf,
                                            context.simulation_threads)
              : detail::PlacementPeaks{};
    if (known != nullptr)
      out.verdict = *known;
    else if (context.budget)
      out.verdict = detail::to_verdict(detail::simulate_under_limit(ops, held, detail::cache_emptied_after_build(stack, context),
                                                                    context.alloc_conf, context.budget->count(), 3,
                                                                    context.simulation_threads),
                                       *context.budget);
    out.method = Method::allocator_simulation;
    if (!peaks) return out;
    out.simulation = Simulation{.peak = p.peak, .first = p.first, .steady = p.steady, .after_build = p.after_build,
                                .reserved = p.reserved, .phase = p.phase, .requests = p.requests};
    out.peak = p.peak;
    out.phase = p.phase;
    // The closed form's bound stays out of `required` here: the simulated peak plus margin, and
    // at least the closed form's expected figure plus margin, as before the bound.
    const Bytes expected = typename Definition::expected_predictor{}.predict(model, step).required;
    out.required = max(expected, p.peak + simulated_margin(p.peak));
    return out;
  });
}
}  // namespace detail

/// Estimates one step (validates both arguments; throws `InvalidInput`, or `Overflow` for a step
/// too large for 64-bit byte counts).
inline Estimate estimate(const ModelShape& model, const Step& step, Stack stack = Stack::hf_peft,
                         const RunContext& context = {}) {
  return detail::estimate_run(model, step, stack, context, true);
}

/// How an answer was obtained and how far it is checked, in one line: "allocator simulation;
/// hf-peft as recorded on NVIDIA H200 with torch ..., transformers ..., peft ...", then the
/// unvalidated part. `method` is the method's name (or, for several estimates, their methods).
inline std::string basis(std::string_view method, Stack stack, const Provenance& p) {
  std::string out = fmt::format("{}; {} as recorded on {} with {} (other GPUs and versions may differ)", method,
                                to_string(stack), p.gpu, p.software);
  if (!p.unvalidated.empty()) out += fmt::format("; {}", p.unvalidated);
  return out;
}
inline std::string basis(const Estimate& e) { return basis(to_string(e.method), e.stack, e.provenance); }
inline BudgetVerdict Estimate::verdict_under(Budget b) const {
  if (verdict && verdict->budget == b.usable) return *verdict;
  if (method == Method::closed_form) return detail::closed_form_verdict(required, b.usable);
  return detail::visit_stack(stack, [&](auto def) {
    using Definition = decltype(def);
    std::string_view why;
    const detail::ProgramChoice chosen = detail::choose_program(inputs.model, inputs.step, stack, inputs.context, why);
    if (chosen.program == nullptr) return detail::closed_form_verdict(required, b.usable);
    return detail::to_verdict(
        detail::simulate_under_limit(*chosen.program, inputs.model, inputs.step,
                                     Definition::held(inputs.model, inputs.step, inputs.context),
                                     detail::cache_emptied_after_build(stack, inputs.context), inputs.context.alloc_conf,
                                     b.usable.count(), 3, inputs.context.simulation_threads),
        b.usable);
  });
}
inline bool Estimate::fits(Budget b) const {
  if (verdict && verdict->budget == b.usable) return verdict->fits;
  if (method == Method::closed_form) return required <= b.usable;
  return verdict_under(b).fits;
}

/// Whether `step` runs under `budget`, and the figures of that decision: the simulation under the
/// limit where a program applies, else the closed form's `required` within it. `estimate` with a
/// budget gives the same verdict and also simulates the peaks; a fit check needs only this.
/// `context` as for `estimate`; its `budget` is replaced by `budget`.
inline BudgetVerdict fit_verdict(const ModelShape& model, const Step& step, Budget budget,
                                 Stack stack = Stack::hf_peft, RunContext context = {}) {
  context.budget = budget.usable;
  return *detail::estimate_run(model, step, stack, context, false).verdict;
}

/// The answer of a search for the largest batch or sequence length that fits a budget.
struct SearchResult {
  std::uint64_t value = 0;  ///< the largest value that fits; 0 when not even 1 does
  bool capped = false;      ///< `value` is the search's limit (batch 2^20, seq 2^24 or `max_seq`'s): larger may fit too
  Estimate at;              ///< the estimate at `value` (at 1 when `value` is 0), with its verdict
  /// Smaller values that would run out of memory under the budget (the simulation's verdict is not
  /// monotone: a smaller batch can split segments worse), ascending.
  std::vector<std::uint64_t> oom_below{};
  /// Values just above `value` that a fresh process runs (`BudgetVerdict::fits_fresh_process`) but
  /// that run out at another segment placement: borderline, ascending (most often none).
  std::vector<std::uint64_t> borderline_above{};
};

namespace detail {
/// Values above the first miss checked for a fit again, and values below the answer checked for
/// an OOM while the limit was reached there (the simulation's verdict is not monotone near the
/// boundary; past these the search takes it to be).
inline constexpr std::uint64_t kSearchAbove = 4, kSearchBelow = 64;

/// Finds the largest value whose run fits the budget (`Estimate::verdict`), starting from the
/// closed form's answer `candidate`: up in doubling strides while values fit, else down, then
/// bisection; then the few values above the first miss whose allocated peak is within the
/// budget; then the values below the answer that still reached the limit, for `oom_below`.
inline SearchResult refine_search(const ModelShape& model, Step step, Budget budget, Stack stack,
                                  std::uint64_t Step::*field, std::uint64_t candidate, std::uint64_t limit,
                                  RunContext context) {
  context.budget = budget.usable;
  const auto at = [&](std::uint64_t v, bool peaks, const BudgetVerdict* known = nullptr) {
    step.*field = v;
    return estimate_run(model, step, stack, context, peaks, known);
  };
  // Most values need only the verdict (`estimate_run` without the peaks); the few whose allocated
  // peak is read, and the answer, get the whole estimate once.
  std::map<std::uint64_t, std::optional<Estimate>> seen;  // nullopt: overflows
  std::map<std::uint64_t, std::optional<Estimate>> whole;
  const auto get = [&](std::uint64_t v) -> const std::optional<Estimate>& {
    auto it = seen.find(v);
    if (it != seen.end()) return it->second;
    std::optional<Estimate> e;
    try {
      e = at(v, false);
    } catch (const Overflow&) {
    }
    return seen.emplace(v, std::move(e)).first->second;
  };
  const auto get_whole = [&](std::uint64_t v) -> const std::optional<Estimate>& {
    auto it = whole.find(v);
    if (it != whole.end()) return it->second;
    std::optional<Estimate> e;
    try {
      e = at(v, true, &*get(v)->verdict);
    } catch (const Overflow&) {
    }
    return whole.emplace(v, std::move(e)).first->second;
  };
  const auto fits = [&](std::uint64_t v) {
    const auto& e = get(v);
    return e.has_value() && e->verdict->fits;
  };
  candidate = std::min(std::max<std::uint64_t>(candidate, 1), limit);
  std::uint64_t fit = 0, miss = candidate;  // invariant: `fit` fits (0: none found), `miss` does not
  if (fits(candidate)) {
    fit = candidate;
    miss = limit + 1;
    for (std::uint64_t stride = 1; fit < limit; stride *= 2) {
      const std::uint64_t probe = limit - fit > stride ? fit + stride : limit;
      if (!fits(probe)) {
        miss = probe;
        break;
      }
      fit = probe;
    }
  } else {
    for (std::uint64_t stride = 1; miss > 1; stride *= 2) {
      const std::uint64_t probe = miss > stride ? miss - stride : 1;
      if (fits(probe)) {
        fit = probe;
        break;
      }
      miss = probe;
    }
  }
  while (fit != 0 && miss - fit > 1) {
    const std::uint64_t mid = fit + (miss - fit) / 2;
    (fits(mid) ? fit : miss) = mid;
  }
  for (std::uint64_t v = miss + 1; v <= limit && v <= std::max(miss, fit) + kSearchAbove; ++v) {
    const auto& e = get(v);
    if (!e || e->method != Method::allocator_simulation) break;
    const auto& w = get_whole(v);
    if (!w || w->peak > budget.usable) break;
    if (e->verdict->fits) fit = v;
  }
  SearchResult out;
  for (std::uint64_t v = fit; v > 1 && fit - v < kSearchBelow;) {
    --v;
    const auto& e = get(v);
    if (!e) continue;
    if (!e->verdict->fits) out.oom_below.insert(out.oom_below.begin(), v);
    else if (!e->verdict->pressed) break;  // ran without reaching the limit: smaller values ask less
  }
  for (std::uint64_t v = fit + 1; v <= limit; ++v) {
    const auto it = seen.find(v);
    if (it == seen.end() || !it->second || !it->second->verdict->fits_fresh_process) break;
    out.borderline_above.push_back(v);
  }
  out.value = fit;
  out.capped = fit == limit;  // the answer is the limit itself, whatever the closed form proposed
  const std::uint64_t shown = fit == 0 ? 1 : fit;
  if (const auto it = whole.find(shown); it != whole.end() && it->second) out.at = *it->second;
  else if (const auto known = seen.find(shown); known != seen.end() && known->second)
    out.at = at(shown, true, &*known->second->verdict);
  else out.at = at(shown, true);
  return out;
}
}  // namespace detail

/// The largest batch whose run fits the budget, the estimate there, and smaller batches that would
/// run out of memory. The closed form brackets it in microseconds; the simulation under the budget
/// (where a program applies) decides. `context`: as `estimate`'s (its budget is `budget`).
inline SearchResult max_batch(const ModelShape& model, Step step, Budget budget, Stack stack = Stack::hf_peft,
                              const RunContext& context = {}) {
  const std::uint64_t candidate = detail::visit_stack(
      stack, [&](auto def) { return typename decltype(def)::expected_predictor{}.max_batch(model, step, budget); });
  return detail::refine_search(model, step, budget, stack, &Step::batch, candidate, 1ULL << 20, context);
}

/// The largest sequence length whose run fits the budget, the estimate there, and smaller lengths
/// that would run out of memory. `limit` (1 to 2^24) bounds the lengths tried: a config's sliding
/// window less one, past which vramfit does not model attention; the answer is then at most it
/// (`capped` when it fits), and no length above it is simulated.
inline SearchResult max_seq(const ModelShape& model, Step step, Budget budget, Stack stack = Stack::hf_peft,
                            const RunContext& context = {}, std::uint64_t limit = 1ULL << 24) {
  detail::require_range("seq limit", limit, 1, 1ULL << 24);
  const std::uint64_t candidate = detail::visit_stack(
      stack, [&](auto def) { return typename decltype(def)::expected_predictor{}.max_seq(model, step, budget); });
  return detail::refine_search(model, step, budget, stack, &Step::seq, candidate, limit, context);
}

/// A training loop that runs steps of varied lengths up to `Step::seq` in one process (dynamic
/// padding), at `Step::batch`.
struct VariedLengths {
  /// The steps' lengths in order, each 1 to `Step::seq`, when known (a data loader's first batches,
  /// a recorded run): the loop is then simulated too. Empty: any lengths up to `Step::seq`.
  std::vector<std::uint64_t> lengths{};
  /// The most lengths simulated: every step's requests are resolved and held for the run (some
  /// 6,000 ops, ~100 KB, a step at 24 layers) and run at every placement, so the time and memory grow
  /// with the steps (32 steps of Qwen2.5-0.5B 4 x 2048: 0.22 s on 2 cores); the bound covers longer loops.
  static constexpr std::size_t max_steps = 32;
};

/// What `estimate_varied_lengths` answers.
struct VariedLengthsEstimate {
  /// Upper bound of the allocated peak of every such loop, any lengths up to `Step::seq` and any
  /// number of steps (the closed form's peak where no program applies, itself a bound).
  Bytes peak;
  Method method = Method::closed_form;
  Estimate longest;  ///< the fixed-shape estimate at `Step::seq` (its verdict under the budget)
  /// The loop of `VariedLengths::lengths` simulated (no limit): allocated peak, where it falls, and
  /// the most reserved. Absent without lengths or a program.
  struct Loop {
    Bytes peak;
    std::string_view phase;
    Bytes reserved_peak;
  };
  std::optional<Loop> loop{};
  /// Under `RunContext::budget`: with lengths, the loop simulated under the limit at every
  /// placement; without, the fixed-shape verdict at `Step::seq` where `peak` is within the budget
  /// (else does not fit), which does not see the fragmentation the lengths' order leaves: a loop
  /// can run out of memory where it says "fits". Give the lengths to simulate it.
  std::optional<BudgetVerdict> verdict{};
};

/// Estimates a loop of varied lengths up to `step.seq` (validates as `estimate`; a length outside 1
/// to `step.seq` is `InvalidInput` naming "lengths"). Where a program applies, `peak` runs the
/// program with every request at its largest size over the lengths and every block made from the
/// first length-dependent request on charged the most slack c10 lets a block hold
/// (tests/validation/README.md#varied-lengths).
inline VariedLengthsEstimate estimate_varied_lengths(const ModelShape& model, const Step& step,
                                                     const VariedLengths& loop = {}, Stack stack = Stack::hf_peft,
                                                     const RunContext& context = {}) {
  if (loop.lengths.size() > VariedLengths::max_steps)
    throw InvalidInput("lengths", fmt::format("at most {} steps are simulated, got {}; without lengths the bound "
                                              "covers a loop of any length",
                                              VariedLengths::max_steps, loop.lengths.size()));
  for (const std::uint64_t q : loop.lengths)
    if (q < 1 || q > step.seq)
      throw InvalidInput("lengths", fmt::format("each must be 1 to seq ({}), got {}", step.seq, q));
  VariedLengthsEstimate out;
  out.longest = estimate(model, step, stack, context);
  out.method = out.longest.method;
  if (out.longest.method == Method::closed_form) {
    // The closed form's peak bounds any process state, a loop's included (#closed-form-as-an-upper-bound).
    out.peak = out.longest.closed_form.peak;
    if (context.budget) out.verdict = detail::closed_form_verdict(out.longest.required, *context.budget);
    return out;
  }
  detail::visit_stack(stack, [&](auto def) {
    using Definition = decltype(def);
    std::string_view why;
    const detail::StepProgram& program = *detail::choose_program(model, step, stack, context, why).program;
    const Bytes held = Definition::held(model, step, context);
    out.peak = max(detail::simulate_slack_bound(program, model, step, held, context.alloc_conf, context.simulation_threads),
                   out.longest.peak);
    if (!loop.lengths.empty()) {
      const detail::ProgramOps ops =
          program.resolve_loop(detail::program_dims(model, step), loop.lengths, model.layers);
      const std::size_t steps = loop.lengths.size();
      const detail::LoopPeaks free_run =
          detail::simulate_loop(ops, steps, held, context.alloc_conf, std::nullopt, context.simulation_threads);
      out.loop = VariedLengthsEstimate::Loop{free_run.peak, free_run.phase, free_run.reserved_peak};
      if (context.budget) {
        const detail::LoopPeaks limited =
            detail::simulate_loop(ops, steps, held, context.alloc_conf, context.budget->count(), context.simulation_threads);
        out.verdict = detail::to_verdict(limited.verdict, *context.budget);
      }
    } else if (context.budget) {
      out.verdict = out.longest.verdict;
      if (out.peak > *context.budget) out.verdict->fits = out.verdict->fits_fresh_process = false;
    }
  });
  return out;
}

/// The estimate's first lines, as `fmt::print("{}", e)` and `vramfit predict` print them: the peak
/// with its phase and method, and what a budget must cover.
inline std::string headline(const Estimate& e) {
  return fmt::format("peak:      {} allocated, in the {} ({})\nrequired:  {} with the allocator's margin\n", e.peak,
                     e.phase_words(), to_string(e.method), e.required);
}

}  // namespace vramfit

/// `fmt::print("{}", verdict)`: the reserved peak and whether the run fits the budget (where it ran
/// out of memory, with the figures PyTorch's message reports); one line each.
template <>
struct fmt::formatter<vramfit::BudgetVerdict> : vramfit::detail::NoFormatSpec {
  auto format(const vramfit::BudgetVerdict& v, format_context& ctx) const -> decltype(ctx.out()) {
    auto out = ctx.out();
    if (v.method == vramfit::Method::closed_form)
      return fmt::format_to(out, "budget:    {} for the allocator: {} (closed form: required {} the budget)\n",
                            v.budget, v.fits ? "fits" : "does not fit", v.fits ? "within" : "above");
    out = fmt::format_to(out, "reserved:  {} at most under the budget (build and three steps simulated)\n",
                         v.reserved_peak);
    if (v.fits) return fmt::format_to(out, "budget:    {} for the allocator: fits (no out of memory)\n", v.budget);
    const vramfit::OutOfMemory& o = *v.oom;
    return fmt::format_to(out,
                          "budget:    {} for the allocator: {}OUT OF MEMORY in {} {}{}: tried to allocate {}; {} "
                          "allocated, {} reserved but unallocated\n",
                          v.budget, v.fits_fresh_process ? "borderline: fits in a fresh process, " : "",
                          o.step == 0 ? "the" : fmt::format("step {}'s", o.step), o.phase,
                          v.fits_fresh_process ? " at another segment placement" : "", o.tried_to_allocate,
                          o.allocated, o.reserved_unallocated);
  }
};

/// `fmt::print("{}", estimate)`: the peak, how it was obtained, `required`, then the closed form's
/// breakdown by term and phase (`breakdown_table`; its own peak and required are the closed form's,
/// not printed where the simulation gave the prediction).
template <>
struct fmt::formatter<vramfit::Estimate> : vramfit::detail::NoFormatSpec {

  auto format(const vramfit::Estimate& e, format_context& ctx) const -> decltype(ctx.out()) {
    auto out = fmt::format_to(ctx.out(), "{}basis:     {}\n", vramfit::headline(e), vramfit::basis(e));
    if (e.verdict) out = fmt::format_to(out, "{}", *e.verdict);
    if (e.simulation)
      out = fmt::format_to(out, "method:    the recorded {} step program through the allocator model ({} requests, "
                                "{} reserved); the terms below are the closed form's breakdown, {} at its peak\n",
                           vramfit::to_string(e.stack), e.simulation->requests, e.simulation->reserved,
                           e.closed_form.peak);
    else
      out = fmt::format_to(out, "method:    closed form; no allocator simulation: {}\n", e.no_simulation);
    return fmt::format_to(out, "\n{}", vramfit::breakdown_table(e.closed_form));
  }
};
