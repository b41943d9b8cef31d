// The vramfit command line: predict a step, find the largest batch or sequence that fits a budget,
// sweep sequence lengths and batches, list the built-in models; with no arguments, a report on
// popular models and cards. `vramfit --help` and `vramfit SUBCOMMAND --help` say how.
//
// Exit status: 0 success; 2 bad input (one line on stderr: "vramfit: error: FLAG: what is wrong");
// 3 when --budget is given and the step does not fit.

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_options.hpp"
#include "vramfit/config_json.hpp"
#include "vramfit/detail/replay.hpp"
#include "vramfit/detail/simulate.hpp"
#include "vramfit/vramfit.hpp"

#ifdef VRAMFIT_WITH_PROBE
#include "probe_command.hpp"  // int run_probe_command(const vramfit::cli::CliOptions&)
#endif

#ifndef VRAMFIT_VERSION
#error "VRAMFIT_VERSION must be defined by the build (examples/CMakeLists.txt)"
#endif

namespace {

using vramfit::Bytes;
using vramfit::ModelShape;
using vramfit::Prediction;
using vramfit::Step;
using vramfit::cli::CliOptions;
using vramfit::cli::Command;
using Json = nlohmann::ordered_json;

constexpr int exit_success = 0;
constexpr int exit_bad_input = 2;
constexpr int exit_does_not_fit = 3;

/// The model a command works on: its shape and where it came from.
struct NamedModel {
  std::string name;  ///< the preset's name, or the config file's path
  bool from_config = false;
  ModelShape shape;
};

NamedModel resolve_model(const CliOptions& o) {
  if (o.config) return {o.config->string(), true, vramfit::load_hf_config(*o.config)};
  return {*o.model, false, vramfit::preset(*o.model)};
}

/// The estimate of one step under the chosen stack, in the flow a measurement ran (`baseline`,
/// `empty_cache_after_build`) or a fresh process.
vramfit::Estimate predict(const CliOptions& o, const ModelShape& shape, const Step& step,
                          std::optional<Bytes> baseline = std::nullopt, bool empty_cache_after_build = false) {
  return vramfit::estimate(shape, step, o.stack,
                           {.held_before = baseline, .cache_emptied_after_build = empty_cache_after_build});
}

Json simulation_json(const vramfit::Estimate& r) {
  if (!r.simulation) return Json{{"available", false}, {"why", r.no_simulation}};
  return Json{{"available", true},
              {"peak_bytes", r.simulation->peak.count()},
              {"first_step_bytes", r.simulation->first.count()},
              {"steady_bytes", r.simulation->steady.count()},
              {"reserved_bytes", r.simulation->reserved.count()},
              {"phase", r.simulation->phase},
              {"requests", r.simulation->requests}};
}

// ---- JSON ---------------------------------------------------------------------------------------

Json model_json(const NamedModel& m) {
  Json j;
  j[m.from_config ? "config" : "name"] = m.name;
  j["vocab"] = m.shape.vocab;
  j["hidden"] = m.shape.hidden;
  j["intermediate"] = m.shape.intermediate;
  j["layers"] = m.shape.layers;
  j["heads"] = m.shape.heads;
  j["kv_heads"] = m.shape.kv_heads;
  j["head_dim"] = m.shape.head_dimension();
  j["tied_embeddings"] = m.shape.tied_embeddings;
  j["qkv_bias"] = m.shape.qkv_bias;
  j["gated_mlp"] = m.shape.gated_mlp;
  j["parameters"] = m.shape.parameters();
  return j;
}

Json step_json(const Step& s) {
  Json j;
  j["batch"] = s.batch;
  j["seq"] = s.seq;
  j["precision"] = vramfit::to_string(s.precision);
  j["mode"] = vramfit::to_string(s.mode);
  if (s.mode == vramfit::Mode::lora) {
    Json targets = Json::array();
    for (vramfit::Module m : vramfit::all_modules)
      if (s.lora.targets.has(m)) targets.push_back(vramfit::to_string(m));
    j["lora_rank"] = s.lora.rank;
    j["lora_targets"] = targets;
  }
  j["gradient_checkpointing"] = s.gradient_checkpointing;
  j["attention"] = vramfit::to_string(s.attention);
  j["logits_retained"] = s.logits_retained;
  j["peak_over"] = vramfit::to_string(s.peak_over);
  j["world_size"] = s.world_size;
  j["sharding"] = vramfit::sharding_name(s);
  return j;
}

Json phases_json(const vramfit::PhaseBytes& bytes) {
  Json j;
  for (vramfit::Phase p : vramfit::all_phases) j[std::string(vramfit::to_key(p))] = bytes[p].count();
  return j;
}

/// The budget's fields: budget_bytes, fits, and headroom_bytes or shortfall_bytes.
void add_budget_json(Json& j, Bytes required, Bytes budget) {
  j["budget_bytes"] = budget.count();
  j["fits"] = required <= budget;
  if (required <= budget)
    j["headroom_bytes"] = (budget - required).count();
  else
    j["shortfall_bytes"] = (required - budget).count();
}

// ---- text ---------------------------------------------------------------------------------------

/// The model and step lines; on several ranks or sharded, a line saying that every figure is per rank.
void print_context(const NamedModel& m, std::string_view step_line, const Step& step) {
  fmt::print("model:  {}: {}\nstep:   {}\n", m.name, vramfit::describe(m.shape), step_line);
  if (!step.single_gpu())
    fmt::print("ranks:  {}: every figure is per rank (rank 0, which holds the largest shard); the batch is each "
               "rank's micro-batch\n",
               vramfit::describe_sharding(step));
}

std::string budget_text(Bytes budget) { return fmt::format("{} ({:i})", budget, budget); }

// ---- subcommands --------------------------------------------------------------------------------

int run_predict(const CliOptions& o) {
  const NamedModel model = resolve_model(o);
  const Step step = o.step(o.batches.front(), o.seqs.front());
  const vramfit::Estimate r = predict(o, model.shape, step);
  const Prediction& p = r.closed_form;
  const bool fits = !o.budget || r.required <= *o.budget;

  if (o.json) {
    Json j;
    j["peak_bytes"] = r.peak.count();
    j["required_bytes"] = r.required.count();
    j["method"] = vramfit::to_string(r.method);
    j["closed_form_peak_bytes"] = p.peak.count();
    j["simulation"] = simulation_json(r);
    j["phase"] = vramfit::to_key(p.phase);
    j["phases"] = phases_json(p.phases);
    Json terms = Json::array();
    for (std::size_t k = 0; k < p.term_count; ++k)
      terms.push_back({{"name", p.terms[k].name},
                       {"bytes", p.term_at_peak(k).count()},
                       {"phases", phases_json(p.terms[k].bytes)}});
    j["terms"] = terms;
    if (o.budget) add_budget_json(j, r.required, *o.budget);
    j["stack"] = p.stack;
    j["model"] = model_json(model);
    j["step"] = step_json(step);
    fmt::print("{}\n", j.dump(2));
  } else {
    print_context(model, vramfit::describe(step), step);
    fmt::print("\n{}", p);
    if (r.simulation)
      fmt::print("\nallocator simulation of the recorded {} step ({} requests): peak {} in the {}\n"
                 "(the prediction; the terms above are the closed form's breakdown, {} at its peak)\n",
                 o.stack == vramfit::Stack::libtorch ? "LibTorch probe" : "HF + PEFT", r.simulation->requests,
                 r.simulation->peak, r.simulation->phase, p.peak);
    else if (!r.no_simulation.empty())
      fmt::print("\nno allocator simulation: {}; the closed form is the prediction\n", r.no_simulation);
    if (o.budget) {
      if (fits)
        fmt::print("\nfits the budget of {}: requires {}, headroom {}\n", budget_text(*o.budget), r.required,
                   *o.budget - r.required);
      else
        fmt::print("\ndoes not fit the budget of {}: requires {}, {} over\n", budget_text(*o.budget), r.required,
                   r.required - *o.budget);
    }
  }
  return fits ? exit_success : exit_does_not_fit;
}

/// max-batch (`search_batch`) or max-seq.
int run_max(const CliOptions& o, bool search_batch) {
  const NamedModel model = resolve_model(o);
  const vramfit::Budget budget(*o.budget);
  Step step = o.step(o.batches.front(), o.seqs.front());
  const std::string_view what = search_batch ? "batch" : "seq";
  const vramfit::SearchResult found = search_batch ? vramfit::max_batch(model.shape, step, budget, o.stack)
                                                   : vramfit::max_seq(model.shape, step, budget, o.stack);
  const std::uint64_t best = found.value;
  (search_batch ? step.batch : step.seq) = best == 0 ? 1 : best;
  const vramfit::Estimate& at = found.at;
  const std::string key = fmt::format("max_{}", what);

  if (o.json) {
    Json j;
    j[key] = best;
    j["budget_bytes"] = budget.usable.count();
    // The step at the answer (at 1 when nothing fits) and its prediction.
    j["capped"] = found.capped;
    j["prediction"] = {{"peak_bytes", at.peak.count()},
                       {"required_bytes", at.required.count()},
                       {"method", vramfit::to_string(at.method)},
                       {"phase", at.phase}};
    j["stack"] = vramfit::to_string(at.stack);
    j["model"] = model_json(model);
    j["step"] = step_json(step);
    fmt::print("{}\n", j.dump(2));
  } else {
    print_context(model, fmt::format("{} {}, {} searched; {}", search_batch ? "seq" : "batch",
                                     search_batch ? step.seq : step.batch, what, vramfit::describe_setup(step)),
                  step);
    fmt::print("stack:  {} ({})\nbudget: {}\n\n", vramfit::to_string(at.stack), vramfit::to_string(at.method), budget_text(budget.usable));
    if (best == 0) {
      fmt::print("max {}: 0: not even {} 1 fits; it requires {} (peak {} in the {})\n", what, what, at.required,
                 at.peak, at.phase);
    } else {
      fmt::print("max {}: {}\n  at {} {}: peak {} in the {}, requires {}\n", what, best, what, best, at.peak, at.phase,
                 at.required);
    }
  }
  return best > 0 ? exit_success : exit_does_not_fit;
}

int run_sweep(const CliOptions& o) {
  const NamedModel model = resolve_model(o);
  struct Row {
    Step step;
    vramfit::Estimate prediction;
  };
  std::vector<Row> rows;  // every prediction first: a bad value fails before anything is printed
  for (std::uint64_t seq : o.seqs)
    for (std::uint64_t batch : o.batches) {
      const Step step = o.step(batch, seq);
      rows.push_back({step, predict(o, model.shape, step)});
    }
  bool all_fit = true;
  std::vector<vramfit::SweepRow> table;
  for (const Row& r : rows) {
    vramfit::SweepRow row{.batch = r.step.batch, .seq = r.step.seq, .predicted = r.prediction.peak};
    if (o.budget) {
      row.fits = r.prediction.required <= *o.budget;
      all_fit = all_fit && *row.fits;
    }
    if (o.json) {
      Json j;
      j["seq"] = r.step.seq;
      j["batch"] = r.step.batch;
      j["peak_bytes"] = r.prediction.peak.count();
      j["required_bytes"] = r.prediction.required.count();
      j["method"] = vramfit::to_string(r.prediction.method);
      j["closed_form_peak_bytes"] = r.prediction.closed_form.peak.count();
      j["phase"] = vramfit::to_key(r.prediction.closed_form.phase);
      if (o.budget) add_budget_json(j, r.prediction.required, *o.budget);
      j["stack"] = r.prediction.closed_form.stack;
      j["world_size"] = r.step.world_size;
      j["sharding"] = vramfit::sharding_name(r.step);
      j[model.from_config ? "config" : "model"] = model.name;
      fmt::print("{}\n", j.dump());
    }
    table.push_back(row);
  }
  if (!o.json) {
    const auto join = [](const std::vector<std::uint64_t>& v) { return fmt::format("{}", fmt::join(v, ",")); };
    print_context(model,
                  fmt::format("seq {} x batch {}; {}", join(o.seqs), join(o.batches),
                              vramfit::describe_setup(o.step(1, 1))),
                  o.step(1, 1));
    fmt::print("stack:  {}\n", vramfit::to_string(o.stack));
    if (o.budget)
      fmt::print("budget: {}; fits: the peak plus the allocator's margin is within it\n", budget_text(*o.budget));
    fmt::print("\n{}", vramfit::sweep_table(table));
  }
  return all_fit ? exit_success : exit_does_not_fit;
}

/// `vramfit replay`: every measured step of a file against its stack's predictor (or --stack),
/// as the record's table or JSON lines; exit 0 when every prediction is at or above the real peak,
/// 3 when one is under.
int run_replay_trace(const CliOptions& o);

int run_replay(const CliOptions& o) {
  if (o.trace) return run_replay_trace(o);
  const vramfit::detail::Measurements data = vramfit::detail::load_measurements(*o.data, "hf-peft");
  if (data.steps.empty())
    throw vramfit::InvalidInput("--data", "no measured steps in '" + o.data->string() + "'");
  bool all_safe = true;
  std::vector<vramfit::SweepRow> table;
  std::string current;
  const auto flush_table = [&] {
    if (!table.empty() && !o.json) fmt::print("{}\n", vramfit::sweep_table(table));
    table.clear();
  };
  for (const vramfit::detail::MeasuredStep& m : data.steps) {
    CliOptions row_options = o;
    row_options.stack = o.stack_given ? o.stack : vramfit::parse_stack(m.stack, "stack_profile");
    // As the harness ran it: the cache emptied after the build, on top of what the process held
    // before the arm (its recorded pre_arm_allocated, where there is one).
    const vramfit::Estimate r = predict(row_options, m.shape, m.step, m.baseline, m.cache_emptied_after_build);
    const Prediction& p = r.closed_form;
    const Bytes real = m.real(m.step.peak_over);
    vramfit::SweepRow row{.batch = m.step.batch, .seq = m.step.seq, .predicted = r.peak, .real = real,
                          .realised_seq = m.realised_seq};
    all_safe = all_safe && r.peak >= real;
    if (o.json) {
      Json j;
      j["line"] = m.line;
      j["model"] = m.model;
      j["stack"] = p.stack;
      j["step"] = vramfit::describe(m.step);
      j["predicted_bytes"] = r.peak.count();
      j["method"] = vramfit::to_string(r.method);
      j["closed_form_bytes"] = p.peak.count();
      j["real_bytes"] = real.count();
      j["ratio"] = *row.ratio();
      j["verdict"] = row.verdict();
      j["phase"] = vramfit::to_key(p.phase);
      fmt::print("{}\n", j.dump());
      continue;
    }
    const std::string heading =
        fmt::format("{} ({}, {}): {}", m.model, p.stack, vramfit::to_string(r.method), vramfit::describe_setup(m.step));
    if (heading != current) {
      flush_table();
      fmt::print("{}\n", heading);
      current = heading;
    }
    table.push_back(row);
  }
  flush_table();
  if (!o.json && data.skipped != 0) fmt::print("({} rows of other kinds or with an error skipped)\n", data.skipped);
  return all_safe ? exit_success : exit_does_not_fit;
}

/// `vramfit replay --trace`: a recorded allocator trace through `CachingAllocatorModel`; exit 0 when
/// the model gives the measured peak of allocated bytes exactly, 3 when it does not.
int run_replay_trace(const CliOptions& o) {
  const vramfit::detail::AllocatorTrace t = vramfit::detail::load_trace(*o.trace);
  const vramfit::detail::TraceReplay r = vramfit::detail::replay_trace(t);
  const bool exact = r.peak_allocated == t.peak_allocated && (!t.peak_requested || r.peak_requested == *t.peak_requested);
  std::size_t requests = 0;
  for (const auto e : t.events) requests += e > 0 ? 1 : 0;
  if (o.json) {
    Json j;
    j["model"] = t.model;
    j["requests"] = requests;
    j["baseline_bytes"] = t.baseline.count();
    j["measured"] = {{"peak_allocated_bytes", t.peak_allocated.count()},
                     {"peak_requested_bytes", t.peak_requested ? Json(t.peak_requested->count()) : Json(nullptr)}};
    j["model_replay"] = {{"peak_allocated_bytes", r.peak_allocated.count()},
                         {"peak_requested_bytes", r.peak_requested.count()},
                         {"reserved_bytes", r.reserved.count()},
                         {"segments", r.segments}};
    j["exact"] = exact;
    fmt::print("{}\n", j.dump());
    return exact ? exit_success : exit_does_not_fit;
  }
  using Align = vramfit::detail::TextTable::Align;
  vramfit::detail::TextTable table({Align::left, Align::right, Align::right, Align::right});
  table.add_row({"", "peak allocated", "peak requested", "slack"});
  const auto slack = [](Bytes a, Bytes b) { return a >= b ? fmt::format("{}", a - b) : std::string("-"); };
  table.add_row({"measured", fmt::format("{}", t.peak_allocated),
                 t.peak_requested ? fmt::format("{}", *t.peak_requested) : std::string("not recorded"),
                 t.peak_requested ? slack(t.peak_allocated, *t.peak_requested) : std::string("-")});
  table.add_row({"allocator model", fmt::format("{}", r.peak_allocated), fmt::format("{}", r.peak_requested),
             slack(r.peak_allocated, r.peak_requested)});
  fmt::print("{}: {} requests and their frees, {} allocated before the trace\n", t.model, requests,
             fmt::format("{}", t.baseline));
  fmt::print("{}", table.render());
  fmt::print("{} segments opened, {} reserved; the model {}\n", r.segments, fmt::format("{}", r.reserved),
             exact ? "gives the measured peaks exactly" : "DIFFERS from the measured peaks");
  return exact ? exit_success : exit_does_not_fit;
}

int run_presets(const CliOptions& o) {
  if (o.json) {
    Json list = Json::array();
    for (const auto& p : vramfit::presets) list.push_back(model_json({std::string(p.name), false, p.shape}));
    fmt::print("{}\n", Json{{"presets", list}}.dump(2));
    return exit_success;
  }
  using Align = vramfit::detail::TextTable::Align;
  vramfit::detail::TextTable table({Align::left, Align::right, Align::right, Align::right, Align::right, Align::right,
                                    Align::right, Align::right, Align::right, Align::left});
  table.add_row({"model", "parameters", "vocab", "hidden", "intermediate", "layers", "heads", "key/value", "head_dim",
                 "other"});
  for (const auto& p : vramfit::presets) {
    const ModelShape& m = p.shape;
    std::string other = m.tied_embeddings ? "tied embeddings" : "";
    if (m.qkv_bias) other += other.empty() ? "q/k/v bias" : ", q/k/v bias";
    table.add_row({std::string(p.name), vramfit::describe_count(m.parameters()), fmt::format("{}", m.vocab),
                   fmt::format("{}", m.hidden), fmt::format("{}", m.intermediate), fmt::format("{}", m.layers),
                   fmt::format("{}", m.heads), fmt::format("{}", m.kv_heads), fmt::format("{}", m.head_dimension()),
                   other});
  }
  fmt::print("Built-in models (--model NAME, case-insensitive), from each model's config.json on the hub:\n\n{}",
             table.render());
  return exit_success;
}

/// `vramfit` with no arguments: popular models and setups against common cards.
int run_report() {
  using namespace vramfit::literals;
  struct Setup {
    std::string_view title;
    Step step;
  };
  const Setup setups[] = {
      {"LoRA r=8 on q_proj,v_proj (PEFT's default)", Step{}},
      {"LoRA r=16 on all-linear, gradient checkpointing",
       Step{.lora = {.rank = 16, .targets = vramfit::TargetSet::all_linear()}, .gradient_checkpointing = true}},
      {"full fine-tuning (AdamW)", Step{.mode = vramfit::Mode::full}},
  };
  constexpr std::string_view models[] = {"SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B", "Qwen2.5-7B", "Llama-3.1-8B"};
  struct Card {
    std::string_view label;
    Bytes total;
  };
  const Card cards[] = {{"24 GB", 24_GB}, {"48 GB", 48_GB}, {"80 GB", 80_GB}, {"141 GB", 141_GB}};
  const Bytes reserved = 1_GiB;
  const vramfit::HfPeftPredictor predictor;

  fmt::print(
      "vramfit {}: the predicted peak GPU memory of one fine-tuning step, before anything runs.\n"
      "Stack hf-peft (HF transformers + PEFT, torch AdamW); seq 2048, batch 1, {}, {} attention.\n"
      "peak GB: the CUDA caching allocator's peak of allocated bytes (torch.cuda.max_memory_allocated)\n"
      "  over a steady-state step, in GB of 10^9 bytes; phase: the part of the step where it falls.\n"
      "{} ... {}: the largest batch at seq 2048 that fits a card of that size; \"-\": not even batch 1.\n"
      "  Usable memory: the card's total ({} = {} x 10^9 bytes) less 1 GiB for the CUDA context\n"
      "  and other processes; a step fits when its peak plus the allocator's margin is within that.\n\n",
      VRAMFIT_VERSION, vramfit::to_string(Step{}.precision), vramfit::to_string(Step{}.attention), cards[0].label,
      cards[std::size(cards) - 1].label, cards[0].label, cards[0].total.count() / 1000000000);

  using Align = vramfit::detail::TextTable::Align;
  vramfit::detail::TextTable table(
      {Align::left, Align::right, Align::left, Align::right, Align::right, Align::right, Align::right});
  std::vector<std::string> heading = {"", "peak GB", "phase"};
  for (const Card& c : cards) heading.emplace_back(c.label);
  table.add_row(std::move(heading));
  for (const Setup& setup : setups) {
    table.add_line(std::string(setup.title));
    for (std::string_view name : models) {
      const ModelShape shape = vramfit::preset(name);
      const Prediction p = predictor.predict(shape, setup.step);
      std::vector<std::string> cells = {fmt::format("  {}", name), fmt::format("{:.3f}", p.peak.gigabytes()),
                                        std::string(vramfit::to_string(p.phase))};
      for (const Card& c : cards) {
        const std::uint64_t batch = predictor.max_batch(shape, setup.step, vramfit::Budget(c.total - reserved));
        cells.push_back(batch == 0 ? "-" : fmt::format("{}", batch));
      }
      table.add_row(std::move(cells));
    }
  }
  fmt::print("{}\nMore: vramfit predict --model Qwen2.5-7B --mode full --budget 80GB; vramfit presets; "
             "vramfit --help\n",
             table.render());
  return exit_success;
}

int run(const CliOptions& o) {
  if (o.version) {
    fmt::print("vramfit {}\n", VRAMFIT_VERSION);
    return exit_success;
  }
  if (o.help) {
    fmt::print("{}", o.command == Command::report ? vramfit::cli::top_level_help(VRAMFIT_VERSION)
                                                  : vramfit::cli::command_help(o.command));
    return exit_success;
  }
  switch (o.command) {
    case Command::report: return run_report();
    case Command::predict: return run_predict(o);
    case Command::max_batch: return run_max(o, true);
    case Command::max_seq: return run_max(o, false);
    case Command::sweep: return run_sweep(o);
    case Command::presets: return run_presets(o);
    case Command::replay: return run_replay(o);
    case Command::probe:
      // ---- the probe: only in builds with LibTorch (VRAMFIT_WITH_PROBE) ----
#ifdef VRAMFIT_WITH_PROBE
      return run_probe_command(o);
#else
      break;  // refused by the parser
#endif
  }
  return exit_bad_input;
}

/// One line, whatever the message holds.
std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

int fail(std::string_view field, std::string_view message) {
  fmt::print(stderr, "vramfit: error: {}: {}\n", one_line(field), one_line(message));
  return exit_bad_input;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  CliOptions options;
  try {
    options = vramfit::cli::parse_command_line(args);
    return run(options);
  } catch (const vramfit::InvalidInput& e) {
    std::string_view message = e.what();
    if (message.starts_with(e.field() + ": ")) message.remove_prefix(e.field().size() + 2);
    return fail(vramfit::cli::flag_for_field(e.field(), options), message);
  } catch (const vramfit::Overflow& e) {
    return fail("--batch/--seq", std::string("the step is too large for 64-bit byte counts (") + e.what() +
                                     "); use a smaller batch or sequence length");
  } catch (const std::exception& e) {
    fmt::print(stderr, "vramfit: error: {}\n", one_line(e.what()));
    return 1;
  }
}
