#pragma once
/// @file common.hpp
/// What the subcommands of the `vramfit` command line share: the exit statuses, the `Command` each
/// subcommand's file defines, flags that read their value with the library's parsers, the model
/// and step flags (read straight into a `vramfit::Step`), and the output helpers.
///
/// Parsing is CLI11's: every subcommand is a `CLI::App` whose flags write into its `Command`;
/// examples/vramfit/cli.cpp builds them, parses, turns every error into one line naming the flag,
/// and runs the command that was asked for.

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramfit/alloc_conf.hpp"
#include "vramfit/estimate.hpp"
#include "vramfit/gpus.hpp"
#include "vramfit/vramfit.hpp"

// CLI11 is header-only and costly to compile: only cli.cpp and flags.cpp include it; the rest see
// its apps and options through these declarations and the functions below.
namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace vramfit::cli {

inline constexpr int exit_success = 0;
inline constexpr int exit_bad_input = 2;       ///< one line on stderr: "vramfit: error: FLAG: message"
inline constexpr int exit_does_not_fit = 3;    ///< or, for replay, an under-prediction

/// Whether this build has the LibTorch probe.
#ifdef VRAMFIT_WITH_PROBE
inline constexpr bool probe_available = true;
#else
inline constexpr bool probe_available = false;
#endif

/// The first bad flag value of a command line. CLI11 runs the flags' callbacks before it looks at
/// --help, so a bad value is kept here and thrown once parsing is done: --help anywhere on the
/// line still prints the help.
class BadValues {
public:
  void keep(const InvalidInput& e) {
    if (!first_) first_ = e;
  }
  void throw_first() const {
    if (first_) throw *first_;
  }

private:
  std::optional<InvalidInput> first_;
};

/// One subcommand: its CLI11 app, whose flags write into the object; once parsed, the checks
/// between flags, then the run.
class Command {
public:
  explicit Command(CLI::App* app) : app_(app) {}
  virtual ~Command() = default;
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  [[nodiscard]] const CLI::App& app() const { return *app_; }
  /// Throws `InvalidInput` when this build cannot run the command (the probe without LibTorch);
  /// checked before anything else on the line.
  virtual void check_build() const {}
  /// Throws `InvalidInput` for flags that contradict each other, or a required one missing.
  virtual void check() const {}
  /// Runs the command; returns the exit status.
  [[nodiscard]] virtual int run(std::FILE* out, std::FILE* err) const = 0;

protected:
  CLI::App* app_;
};

/// The subcommands, each defined in its own file; each adds itself to `app`.
std::unique_ptr<Command> add_predict(CLI::App& app, BadValues& bad);
std::unique_ptr<Command> add_max_batch(CLI::App& app, BadValues& bad);
std::unique_ptr<Command> add_max_seq(CLI::App& app, BadValues& bad);
std::unique_ptr<Command> add_sweep(CLI::App& app, BadValues& bad);
std::unique_ptr<Command> add_presets(CLI::App& app, BadValues& bad);
std::unique_ptr<Command> add_replay(CLI::App& app, BadValues& bad);
/// The probe (probe.cpp with LibTorch; otherwise a command that says it is not in this build).
std::unique_ptr<Command> add_probe(CLI::App& app, BadValues& bad);
/// The probe's usage and summary, for its --help in every build.
inline constexpr std::string_view probe_usage =
    "(--model NAME | --config PATH) [--seq N,N,...] [--batch N,N,...] [flags]";
inline constexpr std::string_view probe_summary =
    "run the steps on a CUDA GPU and compare the real peaks with the predictions";
/// `vramfit` with no arguments: popular models and setups against common cards.
int run_report(std::FILE* out);

// ---- flags ----------------------------------------------------------------------------------------

/// Adds the subcommand `name` to `parent` with its one-line summary, the usage that follows
/// "vramfit NAME" and its exit statuses, for its --help. Arguments it does not take are left to
/// `run`, which names the first one.
CLI::App* add_command(CLI::App& parent, const std::string& name, const std::string& usage,
                      const std::string& summary, const std::string& exit_status);

/// Adds `--flag VALUE` (or `--flag=VALUE`): CLI11 refuses it twice or without a value; `read`
/// takes the value and throws `InvalidInput` naming the flag for a bad one (kept in `bad`).
CLI::Option* add_value(CLI::App& app, BadValues& bad, const std::string& flag, const std::string& value,
                       const std::string& help, std::function<void(std::string_view)> read);
/// Adds the switch `--flag`, which takes no value and is given at most once.
CLI::Option* add_switch(CLI::App& app, const std::string& flag, bool& on, const std::string& help);
/// --stack hf-peft|hf-trainer|libtorch.
CLI::Option* add_stack(CLI::App& app, BadValues& bad, Stack& stack);

/// A whole number of at least 1: no sign, space, fraction or trailing character, at most 64 bits.
/// The library's own limits are checked when the step is validated.
std::uint64_t parse_positive(std::string_view flag, std::string_view text);
/// A probability in [0, 1) written as a decimal ("0.05", "0", ".1", "1e-05"); anything else names `flag`.
double parse_probability(std::string_view flag, std::string_view text);

/// One whole number of at least 1, or with `list` a comma-separated list of them (`parse_positive`
/// each).
std::vector<std::uint64_t> parse_numbers(std::string_view flag, std::string_view text, bool list);

/// --programs FILE|DIR: the step-program file, or DIR/STACK.programs for `stack`; every error names
/// --programs (a damaged file: "--programs: FILE:LINE: ..."). The file may hold another stack's.
std::shared_ptr<const ProgramSet> read_programs_flag(const std::filesystem::path& path, Stack stack);

/// Whether the option was given on the command line.
bool given(const CLI::Option* option);
/// The subcommand's name, as the user typed it.
std::string command_name(const CLI::App& app);

/// Which of the step flags a command takes.
struct StepFlagSet {
  bool batch = true;   ///< --batch (max-batch searches it)
  bool seq = true;     ///< --seq (max-seq searches it)
  bool lists = false;  ///< --batch and --seq take comma-separated lists (sweep, probe)
  bool ranks = true;   ///< --world-size and --sharding (the probe runs on one GPU)
  bool fit = true;     ///< --gpu and --alloc-conf (the decision by simulation; not the probe's)
};

/// The model a command works on: its shape, where it came from, and the step the flags give for it
/// (its precision the config's dtype where --precision is not given).
struct NamedModel {
  std::string name;  ///< the preset's name, or the config file's path
  bool from_config = false;
  ModelShape shape;
  std::optional<std::uint64_t> sliding_window;  ///< the config's, where a layer uses one
  Step step;                                    ///< the step flags, for this model

  /// The step at this batch and sequence length, checked against the model (`validate(step, config)`:
  /// a sequence at or past the sliding window is refused, naming --seq).
  [[nodiscard]] Step at(std::uint64_t batch, std::uint64_t seq) const;
};

/// The flags of every command on a model (predict, max-batch, max-seq, sweep, probe): the model,
/// the step, the stack and the budget.
struct ModelFlags {
  std::optional<std::string> model;             ///< --model: a built-in model, by its canonical name
  std::optional<std::filesystem::path> config;  ///< --config: a Hugging Face config.json
  Step step;                                    ///< every step flag writes straight into it
  std::vector<std::uint64_t> batches{1};        ///< --batch where it takes a list (else `step.batch`)
  std::vector<std::uint64_t> seqs{2048};        ///< --seq where it takes a list (else `step.seq`)
  Stack stack = Stack::hf_peft;
  std::optional<Bytes> budget;                  ///< --budget, or --gpu's card: what the allocator may reserve
  AllocConf alloc_conf;                         ///< --alloc-conf: PYTORCH_CUDA_ALLOC_CONF's settings

  /// Adds the flags to `app`, in the order of its help.
  void add(CLI::App& app, BadValues& bad, StepFlagSet set);
  /// A model (unless `model_required` is false), not two; no LoRA flags with --mode full.
  void check(bool model_required = true) const;
  /// The model (reads the config file) and the step the flags give for it.
  [[nodiscard]] NamedModel resolve() const;
  std::optional<std::filesystem::path> programs_path;  ///< --programs: a step-program file or a directory of them

  /// The run `estimate` decides: the budget (if any), the allocator's settings and --programs's
  /// step programs, read on the first call. A file of another stack than --stack is not used,
  /// and `err` (where given) is told once.
  [[nodiscard]] RunContext context(std::FILE* err = nullptr) const;

private:
  bool precision_given_ = false;            ///< --precision given: the config's dtype does not apply
  bool weights_given_ = false;              ///< --weights given (hf-trainer only)
  bool optim_given_ = false;                ///< --optim given: else the stack's default (hf-trainer: fused AdamW)
  bool grad_accum_given_ = false;           ///< --grad-accum given (hf-trainer only)
  const CLI::Option* lora_rank_ = nullptr;  ///< to tell whether --lora-rank was given
  const CLI::Option* lora_targets_ = nullptr;
  const CLI::Option* lora_dropout_ = nullptr;
  const CLI::Option* budget_ = nullptr;  ///< to tell --budget and --gpu apart
  const CLI::Option* gpu_ = nullptr;
  mutable std::shared_ptr<const ProgramSet> programs_;  ///< --programs, once read
  mutable bool programs_read_ = false;
};

/// A command on a model (predict, max-batch, max-seq, sweep, probe): the model and step flags,
/// added first, and --json, which the command adds after its own flags.
class ModelCommand : public Command {
public:
  ModelCommand(CLI::App* app, BadValues& bad, StepFlagSet set) : Command(app) { flags_.add(*app_, bad, set); }
  void check() const override { flags_.check(); }

protected:
  ModelFlags flags_;
  bool json_ = false;
};

// ---- output ---------------------------------------------------------------------------------------

/// `j` as text; bytes that are not UTF-8 (a path or name from the command line) print as U+FFFD
/// instead of throwing.
template <class Json>
std::string json_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

/// The model's JSON: its shape (vramfit/json.hpp) with "name" (or "config", its path) and "parameters".
nlohmann::json model_json(const NamedModel& m);
/// The budget's fields: budget_bytes, fits (`e.fits`: by simulation where a program applies), and
/// headroom_bytes or shortfall_bytes of `required`.
void add_budget_json(nlohmann::json& j, const Estimate& e, Bytes budget);
/// One step's estimate (vramfit/json.hpp) with the model, the step and, given a budget, its fields.
nlohmann::json estimate_json(const NamedModel& model, const Step& step, const Estimate& e,
                             std::optional<Bytes> budget);

/// The model and step lines; on several ranks or sharded, a line saying every figure is per rank.
void print_context(std::FILE* out, const NamedModel& m, std::string_view step_line, const Step& step);
/// "25.770 GB (24.00 GiB)".
std::string budget_text(Bytes budget);

}  // namespace vramfit::cli
