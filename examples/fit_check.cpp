// A trainer's pre-flight check: before the first step, predict its peak memory, compare it with
// what the card has, and say what to change when it does not fit.

#include <fmt/format.h>

#include <vramfit/vramfit.hpp>

int main() {
  using namespace vramfit::literals;

  const vramfit::ModelShape model = vramfit::preset("Qwen2.5-0.5B");
  const vramfit::Step step{.batch = 4,
                           .seq = 2048,
                           .lora = {.rank = 16, .targets = vramfit::TargetSet::all_linear()},
                           .gradient_checkpointing = true};
  // A 24 GiB card less 1 GiB for the CUDA context and anything else on the card.
  const vramfit::Budget budget(24_GiB - 1_GiB);

  const vramfit::HfPeftPredictor predictor;
  const vramfit::Prediction prediction = predictor.predict(model, step);

  fmt::print("model: {}\nstep:  {}\n\n{}\n", vramfit::describe(model), vramfit::describe(step), prediction);
  const bool fits = prediction.fits(budget);
  fmt::print("fits: {} (requires {} of {}, {:i})\n", fits ? "yes" : "no", prediction.required, budget.usable,
             budget.usable);
  if (!fits) fmt::print("largest batch that fits: {}\n", predictor.max_batch(model, step, budget));
  return 0;
}
