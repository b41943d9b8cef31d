// A consumer of vramfit: predicts a step and checks it fits, through whichever way the package
// was brought in (find_package or add_subdirectory); then estimates it, which must find the
// package's step programs (installed: share/vramfit/programs) and simulate.
#include <vramfit/estimate.hpp>
#include <vramfit/vramfit.hpp>

#include <fmt/core.h>

int main() {
  using namespace vramfit::literals;
  const vramfit::HfPeftPredictor predictor;
  const auto prediction = predictor.predict(vramfit::preset("SmolLM2-135M"), {.batch = 2, .seq = 1024});
  fmt::print("consumer: peak {} fits 24 GiB: {}\n", prediction.peak.count(), prediction <= vramfit::Budget(24_GiB));
  const vramfit::Estimate e = vramfit::estimate(vramfit::preset("SmolLM2-135M"), {.batch = 2, .seq = 1024});
  fmt::print("consumer: {} with {}\n", to_string(e.method), e.provenance.programs);
  return prediction.peak.count() > 0 && prediction <= vramfit::Budget(24_GiB) ? 0 : 1;
}
