// The JSON schema (vramfit/json.hpp) on arbitrary JSON: `get<ModelShape>()` gives a shape that
// passes `validate` and `get<Step>()` a step, each written back and read again to itself; or
// InvalidInput (or Overflow). A shape and step read from one object then go through both stacks'
// closed forms: a prediction whose peak is its largest phase and within `required`, or an error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vramfit/json.hpp"
#include "fuzz.hpp"

namespace {

using vramfit::fuzz::check;

template <class Predictor>
void check_prediction(const vramfit::ModelShape& m, const vramfit::Step& s) {
  // Arguments that pass validate get a prediction or an Overflow, never an InvalidInput.
  const bool valid = vramfit::fuzz::accepts([&] { vramfit::validate(m), vramfit::validate(s, m); });
  const auto run = [&] { return Predictor{}.predict(m, s); };
  const auto p = valid ? vramfit::fuzz::attempt_valid(run) : vramfit::fuzz::attempt(run);
  if (!p) return;
  check(p->peak <= p->required, "peak <= required");
  check(p->peak == p->phases[p->phase], "the peak is its phase's total");
  for (vramfit::Phase phase : vramfit::all_phases) {
    check(p->phases[phase] <= p->peak, "no phase exceeds the peak");
    vramfit::Bytes sum;
    for (std::size_t k = 0; k < p->term_count; ++k) sum += p->terms[k].bytes[phase];
    check(sum == p->phases[phase], "a phase's total is the sum of its terms");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // not JSON: nlohmann's parser, not the schema

  const auto shape = vramfit::fuzz::attempt([&] { return j.get<vramfit::ModelShape>(); });
  if (shape) {
    vramfit::fuzz::must_succeed([&] { vramfit::validate(*shape); return 0; }, "validate(get<ModelShape>())");
    const nlohmann::json written = *shape;
    const auto back = vramfit::fuzz::must_succeed([&] { return written.get<vramfit::ModelShape>(); },
                                                  "get<ModelShape>() of a written shape");
    vramfit::ModelShape explicit_head = *shape;
    explicit_head.head_dim = shape->head_dimension();  // written as the dimension it stands for
    check(back == explicit_head, "a shape written and read back is itself");
  }
  const auto step = vramfit::fuzz::attempt([&] { return j.get<vramfit::Step>(); });
  if (step) {
    const nlohmann::json written = *step;
    const auto back =
        vramfit::fuzz::must_succeed([&] { return written.get<vramfit::Step>(); }, "get<Step>() of a written step");
    check(back == *step, "a step written and read back is itself");
  }
  if (shape && step) {
    check_prediction<vramfit::HfPeftPredictor>(*shape, *step);
    check_prediction<vramfit::LibTorchPredictor>(*shape, *step);
  }
  return 0;
}
