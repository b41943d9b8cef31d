// What the subcommands share besides their flags (flags.cpp): the number parsers, the model a
// command works on, and the output helpers (common.hpp says what each does).

#include "common.hpp"

#include <charconv>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "vramfit/config_json.hpp"
#include "vramfit/json.hpp"

namespace vramfit::cli {

std::shared_ptr<const ProgramSet> read_programs_flag(const std::filesystem::path& path, Stack stack) {
  const std::string name = std::string(to_string(stack));
  std::error_code ec;
  const bool directory = std::filesystem::is_directory(path, ec);
  const std::filesystem::path file = directory ? path / (name + ".programs") : path;
  if (directory && !std::filesystem::exists(file, ec))
    throw InvalidInput("--programs", fmt::format("the directory '{}' holds no {}.programs (the step programs of "
                                                 "--stack {})", path.string(), name, name));
  try {
    return load_programs(file, "--programs");
  } catch (const InvalidInput& e) {
    if (e.field() == "--programs") throw;
    throw InvalidInput("--programs", e.what());  // "FILE:LINE: ..." under the flag's name
  }
}

RunContext ModelFlags::context(std::FILE* err) const {
  RunContext c;
  c.budget = budget;
  c.alloc_conf = alloc_conf;
  if (programs_path && !programs_read_) {
    programs_ = read_programs_flag(*programs_path, stack);
    programs_read_ = true;
    if (programs_->stack != to_string(stack)) {
      if (err != nullptr)
        fmt::print(err, "vramfit: warning: --programs: {} holds step programs of {}, not of --stack {}; they are not used\n",
                   programs_->source, programs_->stack, to_string(stack));
      programs_ = nullptr;
    }
  }
  c.programs = programs_;
  return c;
}

std::uint64_t parse_positive(std::string_view flag, std::string_view text) {
  const std::string expected = "expected a whole number of at least 1, got '" + std::string(text) + "'";
  if (text.empty() || text.front() < '0' || text.front() > '9') throw InvalidInput(flag, expected);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) throw InvalidInput(flag, "'" + std::string(text) + "' is too large");
  if (error != std::errc() || end != text.data() + text.size()) throw InvalidInput(flag, expected);
  if (value == 0) throw InvalidInput(flag, "must be at least 1, got 0");
  return value;
}

double parse_probability(std::string_view flag, std::string_view text) {
  const std::string expected = "expected a number at least 0 and below 1 (e.g. 0.05), got '" + std::string(text) + "'";
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !(value >= 0 && value < 1))
    throw InvalidInput(flag, expected);
  return value;
}

std::vector<std::uint64_t> parse_numbers(std::string_view flag, std::string_view text, bool list) {
  if (!list && text.find(',') != std::string_view::npos)
    throw InvalidInput(flag, "takes one number here, got '" + std::string(text) +
                                 "' (comma-separated lists are for sweep and probe)");
  std::vector<std::uint64_t> values;
  std::string_view rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item.empty())
      throw InvalidInput(flag, "empty item in the list '" + std::string(text) +
                                   "' (expected numbers separated by commas, e.g. 1024,2048)");
    values.push_back(parse_positive(flag, item));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return values;
}

NamedModel ModelFlags::resolve() const {
  NamedModel m;
  if (!config) {
    m = {*model, false, preset(*model), std::nullopt, step};
  } else {
    const HfConfig c = load_hf_config(*config);
    m = {config->string(), true, c.shape, c.sliding_window, step};
    // The config's dtype is the weights' unless --weights says. hf-trainer: --precision is the
    // autocast, so the config's fp32 under --precision bf16 is mixed precision (another pair is
    // refused, naming the weights); without --precision the step runs in the weights' dtype, as
    // a Trainer without bf16/fp16 does (no autocast).
    if (stack == Stack::hf_trainer) {
      if (!weights_given_ && c.dtype && precision_given_) m.step.weights = *c.dtype;
      if (!precision_given_ && !weights_given_ && c.dtype) m.step.precision = *c.dtype;
    } else if (c.dtype && !precision_given_) {
      m.step.precision = *c.dtype;
    }
  }
  if (stack == Stack::hf_trainer && !optim_given_) m.step.optimizer = Optimizer::adamw_fused;
  // hf-trainer with --weights and no --precision: no autocast, the step in the weights' dtype.
  if (stack == Stack::hf_trainer && weights_given_ && !precision_given_) m.step.precision = *m.step.weights;
  if (m.step.weights == m.step.precision) m.step.weights.reset();
  return m;
}

Step NamedModel::at(std::uint64_t batch, std::uint64_t seq) const {
  Step s = step;
  s.batch = batch;
  s.seq = seq;
  validate(s, HfConfig{.shape = shape, .dtype = std::nullopt, .sliding_window = sliding_window});
  return s;
}

nlohmann::json model_json(const NamedModel& m) {
  nlohmann::json j = m.shape;
  j[m.from_config ? "config" : "name"] = m.name;
  j["parameters"] = m.shape.parameters();
  return j;
}

void add_budget_json(nlohmann::json& j, const Estimate& e, Bytes budget) {
  const Bytes required = e.required;
  j["budget_bytes"] = budget.count();
  j["fits"] = e.fits(Budget(budget));
  if (required <= budget)
    j["headroom_bytes"] = (budget - required).count();
  else
    j["shortfall_bytes"] = (required - budget).count();
}

nlohmann::json estimate_json(const NamedModel& model, const Step& step, const Estimate& e,
                             std::optional<Bytes> budget) {
  nlohmann::json j = e;
  if (budget) add_budget_json(j, e, *budget);
  j["model"] = model_json(model);
  j["step"] = step;
  return j;
}

void print_context(std::FILE* out, const NamedModel& m, std::string_view step_line, const Step& step) {
  fmt::print(out, "model:  {}: {}\nstep:   {}\n", m.name, describe(m.shape), step_line);
  if (!step.single_gpu())
    fmt::print(out,
               "ranks:  {}: every figure is per rank (rank 0, which holds the largest shard); the batch is each "
               "rank's micro-batch\n",
               describe_sharding(step));
}

std::string budget_text(Bytes budget) { return fmt::format("{} ({:i})", budget, budget); }

}  // namespace vramfit::cli
