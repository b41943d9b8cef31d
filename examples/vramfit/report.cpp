// `vramfit` with no arguments: popular models and setups against common cards.

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common.hpp"
#include "vramfit/detail/text_table.hpp"

#ifndef VRAMFIT_VERSION
#error "VRAMFIT_VERSION must be defined by the build (examples/CMakeLists.txt)"
#endif

namespace vramfit::cli {

int run_report(std::FILE* out) {
  using namespace vramfit::literals;
  struct Setup {
    std::string_view title;
    Step step;
  };
  const Setup setups[] = {
      {"LoRA r=8 on q_proj,v_proj (PEFT's default)", Step{}},
      {"LoRA r=16 on all-linear, gradient checkpointing",
       Step{.lora = {.rank = 16, .targets = TargetSet::all_linear()}, .gradient_checkpointing = true}},
      {"full fine-tuning (AdamW)", Step{.mode = Mode::full}},
  };
  constexpr std::string_view models[] = {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B", "Qwen2.5-7B", "Llama-3.1-8B"};
  // The columns: a card of each common size, by `--gpu` name (gpus.hpp).
  const std::string_view columns[] = {"RTX-4090", "A100-40GB", "H100-80GB", "H200"};
  const HfPeftPredictor predictor;

  fmt::print(
      out,
      "vramfit {}: the predicted peak GPU memory of one fine-tuning step, before anything runs.\n"
      "Stack hf-peft (HF transformers + PEFT, torch AdamW); seq 2048, batch 1, {}, {} attention.\n"
      "basis: {}\n\n",
      VRAMFIT_VERSION, to_string(Step{}.precision), to_string(Step{}.attention),
      basis(to_string(Method::closed_form), Stack::hf_peft, provenance(Stack::hf_peft)));

  using Align = vramfit::detail::TextTable::Align;
  vramfit::detail::TextTable cards({Align::left, Align::right, Align::right, Align::left});
  cards.add_row({"--gpu", "total GB", "budget GB", "the CUDA driver's share"});
  for (const Gpu& g : gpus)
    cards.add_row({std::string(g.name), fmt::format("{:.3f}", Bytes(g.total_bytes).gigabytes()),
                   fmt::format("{:.3f}", g.allocator_budget().gigabytes()),
                   g.measured ? "measured" : "as measured on the H200 (an estimate)"});
  fmt::print(out,
             "Cards: `--gpu NAME` is the budget the caching allocator may reserve on the card, its total\n"
             "less what the CUDA driver holds (context, cuBLAS, kernels):\n{}\n",
             cards.render());
  fmt::print(out,
             "peak GB: the CUDA caching allocator's peak of allocated bytes (torch.cuda.max_memory_allocated)\n"
             "  over a steady-state step, in GB of 10^9 bytes; phase: the part of the step where it falls.\n"
             "{} ... {}: the largest batch at seq 2048 whose peak plus the allocator's margin is within\n"
             "  the card's budget; \"-\": not even batch 1. `vramfit max-batch --gpu NAME` decides by simulation.\n\n",
             columns[0], columns[std::size(columns) - 1]);
  using Align = vramfit::detail::TextTable::Align;
  vramfit::detail::TextTable table(
      {Align::left, Align::right, Align::left, Align::right, Align::right, Align::right, Align::right});
  std::vector<std::string> heading = {"", "peak GB", "phase"};
  for (std::string_view c : columns) heading.emplace_back(c);
  table.add_row(std::move(heading));
  for (const Setup& setup : setups) {
    table.add_line(std::string(setup.title));
    for (std::string_view name : models) {
      const ModelShape shape = preset(name);
      const Prediction p = predictor.predict(shape, setup.step);
      std::vector<std::string> cells = {fmt::format("  {}", name), fmt::format("{:.3f}", p.peak.gigabytes()),
                                        std::string(to_string(p.phase))};
      for (std::string_view c : columns) {
        const std::uint64_t batch = predictor.max_batch(shape, setup.step, Budget(gpu(c).allocator_budget()));
        cells.push_back(batch == 0 ? "-" : fmt::format("{}", batch));
      }
      table.add_row(std::move(cells));
    }
  }
  fmt::print(out,
             "{}\nMore: vramfit max-batch --model Qwen2.5-7B --gpu H100-80GB; vramfit presets; "
             "vramfit --help\n",
             table.render());
  return exit_success;
}

}  // namespace vramfit::cli
