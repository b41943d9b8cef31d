// `vramfit presets`: the built-in models with their shapes and parameter counts.

#include <fmt/format.h>

#include "common.hpp"
#include "vramfit/detail/text_table.hpp"

namespace vramfit::cli {
namespace {

class Presets final : public Command {
public:
  Presets(CLI::App& parent, BadValues&)
      : Command(add_command(parent, "presets", "[--json]",
                            "list the built-in models with their shapes and parameter counts",
                            "0 success, 2 bad input")) {
    add_switch(*app_, "--json", json_, "print one JSON object instead of text");
  }

  int run(std::FILE* out, std::FILE*) const override {
    if (json_) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& p : presets) list.push_back(model_json({std::string(p.name), false, p.shape, std::nullopt, Step{}}));
      fmt::print(out, "{}\n", json_text(nlohmann::json{{"presets", list}}, 2));
      return exit_success;
    }
    using Align = vramfit::detail::TextTable::Align;
    vramfit::detail::TextTable table({Align::left, Align::right, Align::right, Align::right, Align::right,
                                      Align::right, Align::right, Align::right, Align::right, Align::left});
    table.add_row({"model", "parameters", "vocab", "hidden", "intermediate", "layers", "heads", "key/value",
                   "head_dim", "other"});
    for (const auto& p : presets) {
      const ModelShape& m = p.shape;
      std::string other = m.tied_embeddings ? "tied embeddings" : "";
      if (m.qkv_bias) other += other.empty() ? "q/k/v bias" : ", q/k/v bias";
      if (m.qk_norm) other += other.empty() ? "q/k norms" : ", q/k norms";
      table.add_row({std::string(p.name), describe_count(m.parameters()), fmt::format("{}", m.vocab),
                     fmt::format("{}", m.hidden), fmt::format("{}", m.intermediate), fmt::format("{}", m.layers),
                     fmt::format("{}", m.heads), fmt::format("{}", m.kv_heads), fmt::format("{}", m.head_dimension()),
                     other});
    }
    fmt::print(out, "Built-in models (--model NAME, case-insensitive), from each model's config.json on the hub:\n\n{}",
               table.render());
    return exit_success;
  }

private:
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> add_presets(CLI::App& app, BadValues& bad) { return std::make_unique<Presets>(app, bad); }

}  // namespace vramfit::cli
