// Compile-time checks: a prediction, a size, a parameter count and a largest batch are constant
// expressions, so a fit check can be a static_assert. Building this file is the test.
#include <cstdint>
#include <string_view>

#include "vramfit/bytes.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/step.hpp"
#include "vramfit/terms.hpp"

namespace static_tests {

using namespace vramfit;
using namespace vramfit::literals;

// ---- sizes -----------------------------------------------------------------------------------
static_assert(parse_size("24GiB") == 24_GiB);
static_assert(parse_size("24GiB").count() == 25769803776ULL);
static_assert(parse_size("23.0 GB") == 23_GB);
static_assert(parse_size("80e9B") == 80_GB);
static_assert(parse_size("16384MiB") == 16_GiB);
static_assert(parse_size("1.5 TiB") == 1536_GiB);
static_assert(parse_size(" 7 gb ") == 7_GB);
static_assert(parse_size("512 B") == 512_B);
static_assert(parse_size("0.5B") == 0_B);
static_assert(24_GiB > 24_GB);
static_assert(1_KiB + 1_KiB == 2_KiB);
static_assert(3 * 1_MiB == 3_MiB);
static_assert(bytes_of(2, {3, 4}) == Bytes(24));
static_assert(max(1_GB, 1_GiB) == 1_GiB);

// ---- parameter counts of the presets (published totals) ---------------------------------------
static_assert(find_preset("SmolLM2-135M")->parameters() == 134515008ULL);
static_assert(find_preset("Qwen2.5-0.5B")->parameters() == 494032768ULL);
static_assert(find_preset("Llama-3.2-1B")->parameters() == 1235814400ULL);
static_assert(find_preset("Llama-3.1-8B")->parameters() == 8030261248ULL);
static_assert(find_preset("Mistral-7B-v0.1")->parameters() == 7241732096ULL);
static_assert(find_preset("smollm2-135m").has_value());  // case-insensitive
static_assert(!find_preset("GPT-2").has_value());
static_assert(find_preset("Qwen2.5-0.5B")->head_dimension() == 64);
static_assert(find_preset("Qwen2.5-0.5B")->kv_width() == 128);

// ---- words users type --------------------------------------------------------------------------
static_assert(parse_targets("q_proj,v_proj") == TargetSet::peft_default());
static_assert(parse_targets("all-linear") == TargetSet::all_linear());
static_assert(parse_precision("bf16") == Precision::bf16);
static_assert(parse_attention("math") == Attention::math);
static_assert(to_string(Phase::loss_backward) == "loss backward");

// ---- a prediction is a constant expression -------------------------------------------------------
constexpr ModelShape smol = *find_preset("SmolLM2-135M");
constexpr Step step{.batch = 4, .seq = 2048};
constexpr auto p = HfPeftPredictor{}.predict(smol, step);
static_assert(p <= Budget(24_GiB));
static_assert(p > Budget(1_GiB));
static_assert(p.fits(Budget(p.required)));
static_assert(!p.fits(Budget(p.required - 1_B)));
static_assert(p.peak < p.required);
static_assert(p.phase == Phase::loss_backward);  // LoRA, 8192 tokens x 49152 vocab
static_assert(p.phases[p.phase] == p.peak);
static_assert(p.term_count == 5);  // parameters, activations, logits, workspace, allocator slack
static_assert(p.terms[2].name == "logits");
static_assert(p.stack == "hf-peft");
// The logits term at the loss backward: 8192 tokens x 49152 vocab x 12 B.
static_assert(p.terms[2].bytes[Phase::loss_backward] == Bytes(8192ULL * 49152 * 12));

// Full fine-tuning of short sequences peaks in the optimizer step.
constexpr auto full = HfPeftPredictor{}.predict(smol, Step{.batch = 1, .seq = 128, .mode = Mode::full});
static_assert(full.phase == Phase::optimizer_step);
// Weights, grads, two moments and foreach temporaries: 10 B per parameter in bf16.
static_assert(full.terms[0].bytes[Phase::optimizer_step] == Bytes(10 * 134515008ULL));

// The first step peaks no higher than the steady state; the lean stack below HF + PEFT.
constexpr auto first = HfPeftPredictor{}.predict(smol, Step{.batch = 4, .seq = 2048, .peak_over = PeakOver::first_step});
static_assert(first.peak <= p.peak);
static_assert(LibTorchPredictor{}.predict(smol, step).peak < p.peak);
static_assert(LogitsTerm<profiles::HfPeft>::per_element(Step{})[Phase::loss_backward] == Bytes(12));
static_assert(LogitsTerm<profiles::LibTorch>::per_element(Step{})[Phase::loss_backward] == Bytes(6));

// ---- max_batch and max_seq at compile time, exact at the boundary ----------------------------------
constexpr HfPeftPredictor hf{};
constexpr Budget card(24_GiB);
constexpr std::uint64_t largest_batch = hf.max_batch(smol, step, card);
static_assert(largest_batch >= 4);
static_assert(hf.fits(smol, Step{.batch = largest_batch, .seq = 2048}, card));
static_assert(!hf.fits(smol, Step{.batch = largest_batch + 1, .seq = 2048}, card));
static_assert(hf.max_batch(smol, step, Budget(1_GiB)) == 0);  // the weights and 64 MiB margin, but not one row

constexpr std::uint64_t longest = hf.max_seq(smol, Step{.batch = 1}, card);
static_assert(hf.fits(smol, Step{.batch = 1, .seq = longest}, card));
static_assert(!hf.fits(smol, Step{.batch = 1, .seq = longest + 1}, card));

// ---- the CostTerm concept ---------------------------------------------------------------------------
struct ConstantTerm {
  static constexpr std::string_view name = "constant";
  constexpr PhaseBytes operator()(const ModelShape&, const Step&) const { return PhaseBytes{}.add_everywhere(1_MiB); }
};
struct NoName {
  PhaseBytes operator()(const ModelShape&, const Step&) const;
};
struct WrongResult {
  static constexpr std::string_view name = "wrong";
  Bytes operator()(const ModelShape&, const Step&) const;
};
struct NonConstCall {
  static constexpr std::string_view name = "non-const";
  PhaseBytes operator()(const ModelShape&, const Step&);
};
struct NumberForName {
  static constexpr int name = 3;
  PhaseBytes operator()(const ModelShape&, const Step&) const;
};
struct TakesNoStep {
  static constexpr std::string_view name = "no step";
  PhaseBytes operator()(const ModelShape&) const;
};

static_assert(CostTerm<ConstantTerm>);
static_assert(CostTerm<ParameterTerm<profiles::HfPeft>>);
static_assert(CostTerm<ActivationTerm<profiles::LibTorch>>);
static_assert(CostTerm<LogitsTerm<profiles::HfPeft>>);
static_assert(CostTerm<WorkspaceTerm<profiles::LibTorch>>);
static_assert(!CostTerm<NoName>);
static_assert(!CostTerm<WrongResult>);
static_assert(!CostTerm<NonConstCall>);
static_assert(!CostTerm<NumberForName>);
static_assert(!CostTerm<TakesNoStep>);
static_assert(!CostTerm<int>);
static_assert(StackProfile<profiles::HfPeft>);
static_assert(!StackProfile<ConstantTerm>);

// A user-defined term in a Predictor, at compile time: 1 MiB in every phase on top of the standard terms.
using WithConstant = Predictor<ParameterTerm<profiles::HfPeft>, ActivationTerm<profiles::HfPeft>,
                               LogitsTerm<profiles::HfPeft>, WorkspaceTerm<profiles::HfPeft>, ConstantTerm>;
using WithoutConstant = Predictor<ParameterTerm<profiles::HfPeft>, ActivationTerm<profiles::HfPeft>,
                                  LogitsTerm<profiles::HfPeft>, WorkspaceTerm<profiles::HfPeft>>;
static_assert(WithConstant{}.predict(smol, step).peak == WithoutConstant{}.predict(smol, step).peak + 1_MiB);
static_assert(WithConstant{}.predict(smol, step).terms[4].name == "constant");
static_assert(WithConstant::stack == "hf-peft");
static_assert(Predictor<ConstantTerm>{}.predict(smol, step).peak == 1_MiB);
static_assert(Predictor<ConstantTerm>::stack.empty());

}  // namespace static_tests
