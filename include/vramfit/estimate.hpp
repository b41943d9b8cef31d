#pragma once
/// @file estimate.hpp
/// The answer vramfit gives for a step, from one call: `estimate(model, step, stack)` runs the
/// closed form (the breakdown by term and phase) and, where a step program was recorded for the
/// step's kind, the allocator simulation, which is then the peak; `required` is what a budget must
/// cover. `max_batch` and `max_seq` answer with the same figure.
///
///     const vramfit::Estimate e = vramfit::estimate(vramfit::preset("Qwen2.5-0.5B"), step);
///     if (!e.fits(vramfit::Budget(23_GiB))) ...;  // e.peak, e.required, e.method, e.closed_form

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "vramfit/bytes.hpp"
#include "vramfit/format.hpp"
#include "vramfit/model.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/sharding.hpp"
#include "vramfit/step.hpp"
#include "vramfit/detail/enum_names.hpp"
#include "vramfit/detail/programs/hf_peft.hpp"
#include "vramfit/detail/programs/libtorch.hpp"
#include "vramfit/detail/simulate.hpp"

namespace vramfit {

/// The software stack a step runs on: HF transformers + PEFT in a plain loop (`hf_peft`), or the
/// Probe's LibTorch reference step (`libtorch`).
enum class Stack : std::uint8_t { hf_peft, libtorch };

/// How the peak was obtained: the recorded step program through the allocator model, or the
/// closed-form terms alone (no program was recorded for this kind of step).
enum class Method : std::uint8_t { allocator_simulation, closed_form };

VRAMFIT_ENUM_NAMES(Stack, "stack", {Stack::hf_peft, "hf-peft"}, {Stack::libtorch, "libtorch"});
VRAMFIT_ENUM_NAMES(Method, "method",
                   {Method::allocator_simulation, "allocator simulation"}, {Method::closed_form, "closed form"});

constexpr std::string_view to_string(Stack s) { return detail::enum_name(s); }
constexpr std::string_view to_string(Method m) { return detail::enum_name(m); }
/// The stack named `text` ("hf-peft", "libtorch"); `InvalidInput` naming `field` otherwise.
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

/// How the process stood when the run began. The defaults are a fresh process, as users run it;
/// the replay of measurements sets what the harness's process held.
struct RunContext {
  /// Bytes allocated before the build. Default: the stack's own (hf-peft: the cuBLAS workspaces;
  /// libtorch: none, the Probe releases them). For hf-peft never less than the workspaces.
  std::optional<Bytes> held_before;
  bool cache_emptied_after_build = false;  ///< `torch.cuda.empty_cache()` between build and step 1
};

/// Where an estimate's figures come from and how far they are checked: the GPU and software its
/// stack's step programs (and profile) were recorded on, and what is not validated.
struct Provenance {
  std::string_view gpu;         ///< "NVIDIA H200"
  std::string_view software;    ///< "torch 2.11.0+cu130, transformers 5.17.0, peft 0.21.0"
  std::string_view unvalidated; ///< empty on one GPU; else `sharding_caveat(step)`
};

/// One step's estimate: the peak, what a budget must cover, how it was obtained and why.
struct Estimate {
  Stack stack = Stack::hf_peft;
  Method method = Method::closed_form;
  Bytes peak;                            ///< allocated peak: the simulation's where one ran, else the closed form's
  Bytes required;                        ///< peak plus the allocator's margin, the larger of both methods'
  std::string_view phase;                ///< where `peak` falls (the closed form's `to_key` names, the simulation's)
  Prediction closed_form;                ///< the terms by phase: the breakdown, and the fallback
  std::optional<Simulation> simulation;  ///< where a program applies
  std::string_view no_simulation;        ///< why none applies (empty when one ran)
  Provenance provenance;                 ///< recorded on what, and what is not validated

  /// Whether the step fits: `required` within the budget.
  [[nodiscard]] constexpr bool fits(Budget b) const { return required <= b.usable; }
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
  using expected_predictor =
      Predictor<ParameterTerm<P>, ActivationTerm<P>, LogitsTerm<P>, WorkspaceTerm<P>, ExpectedSlackTerm<P>>;
  static constexpr const auto& programs() {
    if constexpr (std::is_same_v<P, profiles::LibTorch>) return programs::libtorch::entries;
    else return programs::hf_peft::entries;
  }
  static constexpr Provenance recorded() {
    if constexpr (std::is_same_v<P, profiles::LibTorch>)
      return {programs::libtorch::recorded_gpu, programs::libtorch::recorded_software, {}};
    else return {programs::hf_peft::recorded_gpu, programs::hf_peft::recorded_software, {}};
  }
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

template <class F>
decltype(auto) visit_stack(Stack s, F&& f) {
  if (s == Stack::libtorch) return f(StackDefinition<profiles::LibTorch>{});
  return f(StackDefinition<profiles::HfPeft>{});
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
  return detail::visit_stack(stack, [&](auto def) {
    std::string_view why;
    (void)detail::find_entry(decltype(def)::programs(), model, step, why);
    return why;
  });
}

/// Estimates one step (validates both arguments; throws `InvalidInput`, or `Overflow` for a step
/// too large for 64-bit byte counts).
inline Estimate estimate(const ModelShape& model, const Step& step, Stack stack = Stack::hf_peft,
                         const RunContext& context = {}) {
  return detail::visit_stack(stack, [&](auto def) {
    using Definition = decltype(def);
    const typename Definition::predictor predictor;
    Estimate out;
    out.stack = stack;
    out.provenance = provenance(stack, step);
    out.closed_form = predictor.predict(model, step);
    out.peak = out.closed_form.peak;
    out.required = out.closed_form.required;
    out.phase = to_key(out.closed_form.phase);
    const auto* entry = detail::find_entry(Definition::programs(), model, step, out.no_simulation);
    if (entry == nullptr) return out;
    const detail::PlacementPeaks p =
        detail::simulate_placements(detail::parsed(Definition::programs(), *entry), model, step,
                                    Definition::held(model, step, context), context.cache_emptied_after_build);
    out.simulation = Simulation{.peak = p.peak, .first = p.first, .steady = p.steady, .after_build = p.after_build,
                                .reserved = p.reserved, .phase = p.phase, .requests = p.requests};
    out.method = Method::allocator_simulation;
    out.peak = p.peak;
    out.phase = p.phase;
    // The closed form's bound stays out of `required` here: the simulated peak plus margin, and
    // at least the closed form's expected figure plus margin, as before the bound.
    const Bytes expected = typename Definition::expected_predictor{}.predict(model, step).required;
    out.required = max(expected, p.peak + predictor.margin()(p.peak));
    return out;
  });
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

/// The answer of a search for the largest batch or sequence length that fits a budget.
struct SearchResult {
  std::uint64_t value = 0;  ///< the largest value that fits; 0 when not even 1 does
  bool capped = false;      ///< `value` is the search's limit (batch 2^20, seq 2^24): larger may fit too
  Estimate at;              ///< the estimate at `value` (at 1 when `value` is 0)
};

namespace detail {
/// Refines `candidate` (an upper bound: the expected closed form's answer, and an estimate's
/// `required` is never below that closed form's) to the largest value whose estimate fits: down in doubling strides
/// until one fits, then bisection.
inline SearchResult refine_search(const ModelShape& model, Step step, Budget budget, Stack stack,
                                  std::uint64_t Step::*field, std::uint64_t candidate, std::uint64_t limit) {
  const auto at = [&](std::uint64_t v) {
    step.*field = v;
    return estimate(model, step, stack);
  };
  const auto fits = [&](std::uint64_t v) {
    try {
      return at(v).fits(budget);
    } catch (const Overflow&) {
      return false;
    }
  };
  SearchResult out;
  std::uint64_t fit = 0, miss = candidate + 1;  // invariant: `fit` fits (0: none found), `miss` does not
  if (candidate > 0 && fits(candidate)) {
    fit = candidate;
  } else if (candidate > 0) {
    miss = candidate;
    for (std::uint64_t stride = 1; miss > 1; stride *= 2) {
      const std::uint64_t probe = miss > stride ? miss - stride : 1;
      if (fits(probe)) {
        fit = probe;
        break;
      }
      miss = probe;
    }
    while (fit != 0 && miss - fit > 1) {
      const std::uint64_t mid = fit + (miss - fit) / 2;
      (fits(mid) ? fit : miss) = mid;
    }
  }
  out.value = fit;
  out.capped = fit == limit;  // the answer is the limit itself, whatever the closed form proposed
  out.at = at(fit == 0 ? 1 : fit);
  return out;
}
}  // namespace detail

/// The largest batch whose step fits the budget, and the estimate there. The closed form brackets
/// it in microseconds; the simulation (where a program applies) confirms the answer.
inline SearchResult max_batch(const ModelShape& model, Step step, Budget budget, Stack stack = Stack::hf_peft) {
  const std::uint64_t candidate = detail::visit_stack(
      stack, [&](auto def) { return typename decltype(def)::expected_predictor{}.max_batch(model, step, budget); });
  return detail::refine_search(model, step, budget, stack, &Step::batch, candidate, 1ULL << 20);
}

/// The largest sequence length whose step fits the budget, and the estimate there.
inline SearchResult max_seq(const ModelShape& model, Step step, Budget budget, Stack stack = Stack::hf_peft) {
  const std::uint64_t candidate = detail::visit_stack(
      stack, [&](auto def) { return typename decltype(def)::expected_predictor{}.max_seq(model, step, budget); });
  return detail::refine_search(model, step, budget, stack, &Step::seq, candidate, 1ULL << 24);
}

}  // namespace vramfit

/// `fmt::print("{}", estimate)`: the peak, how it was obtained, `required`, then the closed form's
/// breakdown by term and phase.
template <>
struct fmt::formatter<vramfit::Estimate> : vramfit::detail::NoFormatSpec {

  auto format(const vramfit::Estimate& e, format_context& ctx) const -> decltype(ctx.out()) {
    auto out = fmt::format_to(ctx.out(), "peak:      {} allocated, in the {} ({})\n", e.peak, e.phase,
                              vramfit::to_string(e.method));
    out = fmt::format_to(out, "required:  {} with the allocator's margin\n", e.required);
    out = fmt::format_to(out, "basis:     {}\n", vramfit::basis(e));
    if (e.simulation)
      out = fmt::format_to(out, "method:    the recorded {} step program through the allocator model ({} requests, "
                                "{} reserved); the terms below are the closed form's breakdown, {} at its peak\n",
                           vramfit::to_string(e.stack), e.simulation->requests, e.simulation->reserved,
                           e.closed_form.peak);
    else
      out = fmt::format_to(out, "method:    closed form; no allocator simulation: {}\n", e.no_simulation);
    return fmt::format_to(out, "\n{}", e.closed_form);
  }
};
