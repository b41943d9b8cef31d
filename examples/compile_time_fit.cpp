// A pre-flight assertion at build time: this configuration fits a 24 GiB card, or the program
// does not compile. The whole prediction runs in the compiler.

#include <fmt/format.h>

#include <vramfit/vramfit.hpp>

using namespace vramfit::literals;

constexpr vramfit::HfPeftPredictor predictor;
constexpr vramfit::Step step{.batch = 4, .seq = 2048};  // LoRA r=8 on q_proj,v_proj, bf16
constexpr vramfit::Prediction prediction = predictor.predict(*vramfit::find_preset("SmolLM2-135M"), step);

static_assert(prediction <= vramfit::Budget(24_GiB), "SmolLM2-135M at batch 4 x seq 2048 must fit a 24 GiB card");

int main() {
  fmt::print("compile-time check passed: SmolLM2-135M, {}, requires {} of 24 GiB\n", vramfit::describe(step),
             prediction.required);
  return 0;
}
