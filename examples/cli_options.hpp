#pragma once
/// @file cli_options.hpp
/// The options of the `vramfit` command line and their hand-written parser. One table of flags
/// (`flags`) drives both the parser and every subcommand's --help, so no flag is accepted without
/// being documented. Every error is a `vramfit::InvalidInput` naming the flag at fault; the
/// caller prints it on one line and exits 2.
///
/// The `probe` subcommand (built with VRAMFIT_WITH_PROBE) takes the same model and step flags as
/// `sweep`, lists included; a flag of its own goes into `flags` with the `probe` bit.

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "vramfit/estimate.hpp"
#include "vramfit/vramfit.hpp"

namespace vramfit::cli {

/// The subcommands; `report` is `vramfit` with no arguments.
enum class Command : std::uint8_t { report, predict, max_batch, max_seq, sweep, presets, probe, replay };

/// A subcommand's name, usage line and one-line summary, for the help texts.
struct CommandInfo {
  Command command;
  std::string_view name;
  std::string_view usage;    ///< what follows "vramfit NAME" in the usage line
  std::string_view summary;  ///< what it does
};

inline constexpr std::array<CommandInfo, 7> commands = {{
    {Command::predict, "predict", "(--model NAME | --config PATH) [flags]",
     "predict the peak memory of one step, with its breakdown by term and phase"},
    {Command::max_batch, "max-batch", "(--model NAME | --config PATH) --budget SIZE [flags]",
     "the largest batch whose step fits the budget"},
    {Command::max_seq, "max-seq", "(--model NAME | --config PATH) --budget SIZE [flags]",
     "the largest sequence length whose step fits the budget"},
    {Command::sweep, "sweep", "(--model NAME | --config PATH) [--seq N,N,...] [--batch N,N,...] [flags]",
     "predict every (seq, batch) pair and print the record's sweep table"},
    {Command::presets, "presets", "[--json]", "list the built-in models with their shapes and parameter counts"},
    {Command::probe, "probe", "(--model NAME | --config PATH) [--seq N,N,...] [--batch N,N,...] [flags]",
     "run the steps on a CUDA GPU and compare the real peaks with the predictions"},
    {Command::replay, "replay", "(--data FILE.jsonl [--stack hf-peft|libtorch] | --trace FILE.jsonl) [--json]",
     "predict every step measured in a file (tests/data/*.jsonl) and print predicted, real, pred/real, verdict; "
     "or replay an allocator trace (tests/data/traces/) through the caching-allocator model"},
}};

/// Whether this build has the LibTorch probe.
#ifdef VRAMFIT_WITH_PROBE
inline constexpr bool probe_available = true;
#else
inline constexpr bool probe_available = false;
#endif

/// The stack profile behind --stack.
using vramfit::Stack;

/// Every option of every subcommand, with the CLI's defaults.
struct CliOptions {
  Command command = Command::report;
  bool help = false;     ///< --help or -h: print the usage of `command` and exit 0
  bool version = false;  ///< --version (top level)

  std::optional<std::string> model;             ///< --model: a built-in model, by its canonical name
  std::optional<std::filesystem::path> config;  ///< --config: a Hugging Face config.json
  std::vector<std::uint64_t> batches = {1};     ///< --batch: one value, or a list for sweep and probe
  std::vector<std::uint64_t> seqs = {2048};     ///< --seq: one value, or a list for sweep and probe
  Mode mode = Mode::lora;
  std::optional<std::uint64_t> lora_rank;    ///< --lora-rank, when given
  std::optional<TargetSet> lora_targets;     ///< --lora-targets, when given
  bool gradient_checkpointing = false;
  bool logits_retained = false;
  Attention attention = Attention::flash;
  Stack stack = Stack::hf_peft;
  PeakOver peak_over = PeakOver::steady;
  Precision precision = Precision::bf16;
  std::optional<Bytes> budget;  ///< --budget: what the allocator may use
  bool json = false;
  bool instruments = false;      ///< probe --instruments: loss bytes per element, SDPA backends, stack
  std::uint64_t repeats = 1;     ///< probe --repeats: runs of each step
  std::optional<std::filesystem::path> data;  ///< replay --data: a measurements file
  std::optional<std::filesystem::path> trace; ///< replay --trace: an allocator trace
  std::optional<std::filesystem::path> trace_out; ///< probe --trace-out: where to write step traces
  bool stack_given = false;      ///< --stack was on the command line (replay: else each row's own)
  std::uint64_t world_size = 1;  ///< --world-size: data-parallel ranks
  ShardingChoice sharding{};     ///< --sharding: strategy, and the group size for hybrid

  /// The step for one batch and sequence length, every other flag applied.
  [[nodiscard]] Step step(std::uint64_t batch, std::uint64_t seq) const {
    Step s;
    s.batch = batch;
    s.seq = seq;
    s.precision = precision;
    s.mode = mode;
    s.lora.rank = lora_rank.value_or(Lora{}.rank);
    s.lora.targets = lora_targets.value_or(Lora{}.targets);
    s.gradient_checkpointing = gradient_checkpointing;
    s.attention = attention;
    s.logits_retained = logits_retained;
    s.peak_over = peak_over;
    s.world_size = world_size;
    s.sharding = sharding.sharding;
    s.shard_group = sharding.shard_group;
    return s;
  }
};

/// The bit of a subcommand in `Flag::commands`.
constexpr unsigned bit(Command c) { return 1u << static_cast<unsigned>(c); }

/// A flag: its name, what its value looks like, its help line, the subcommands that take it and
/// what it does to the options.
struct Flag {
  std::string_view name;
  std::string_view value;  ///< the value's placeholder in the help ("N", "PATH"); empty for a switch
  std::string_view help;   ///< what it means, the allowed values and the default
  unsigned commands;       ///< bits of the subcommands that take it
  std::string_view list_help;  ///< the help in sweep and probe, where it differs (a list of values)
  void (*apply)(CliOptions&, std::string_view flag, std::string_view value);
};

namespace detail {

/// Subcommands that take a comma-separated list for --batch and --seq.
inline constexpr unsigned list_commands = bit(Command::sweep) | bit(Command::probe);
/// Subcommands that predict steps of a model.
inline constexpr unsigned model_commands =
    bit(Command::predict) | bit(Command::max_batch) | bit(Command::max_seq) | list_commands;
/// Subcommands that predict for several ranks (the probe runs on one GPU).
inline constexpr unsigned rank_commands = model_commands & ~bit(Command::probe);

/// A whole number of at least 1. Rejects signs, spaces, fractions, trailing characters and
/// values beyond 64 bits; the library's own limits are checked when the step is validated.
inline std::uint64_t parse_positive(std::string_view flag, std::string_view text) {
  const std::string expected = "expected a whole number of at least 1, got '" + std::string(text) + "'";
  if (text.empty() || text.front() < '0' || text.front() > '9') throw InvalidInput(flag, expected);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) throw InvalidInput(flag, "'" + std::string(text) + "' is too large");
  if (error != std::errc() || end != text.data() + text.size()) throw InvalidInput(flag, expected);
  if (value == 0) throw InvalidInput(flag, "must be at least 1, got 0");
  return value;
}

/// One number, or a comma-separated list where the subcommand takes lists.
inline std::vector<std::uint64_t> parse_numbers(const CliOptions& o, std::string_view flag, std::string_view text) {
  const bool list = (bit(o.command) & list_commands) != 0;
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

/// The canonical name of a built-in model, matched case-insensitively.
inline std::string canonical_preset_name(std::string_view name) {
  (void)preset(name, "--model");  // throws, listing the built-in models
  for (const auto& p : presets)
    if (vramfit::detail::iequals(p.name, name)) return std::string(p.name);
  return std::string(name);
}

inline Stack parse_stack(std::string_view flag, std::string_view text) { return vramfit::parse_stack(text, flag); }

}  // namespace detail

/// Every flag of every subcommand. --help, -h and --version are handled before this table.
inline constexpr std::array flags = {
    Flag{"--model", "NAME", "a built-in model (see `vramfit presets`), e.g. Qwen2.5-0.5B; or give --config",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view, std::string_view v) { o.model = detail::canonical_preset_name(v); }},
    Flag{"--config", "PATH", "a Hugging Face config.json (model_type llama, qwen2 or mistral); or give --model",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view, std::string_view v) { o.config = std::filesystem::path(v); }},
    Flag{"--batch", "N", "sequences per step, 1 to 1048576 (default 1)",
         detail::model_commands & ~bit(Command::max_batch),
         "sequences per step, 1 to 1048576, one value or a comma-separated list (default 1)",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.batches = detail::parse_numbers(o, f, v); }},
    Flag{"--seq", "N", "tokens per sequence, 1 to 16777216 (default 2048)",
         detail::model_commands & ~bit(Command::max_seq),
         "tokens per sequence, 1 to 16777216, one value or a comma-separated list (default 2048)",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.seqs = detail::parse_numbers(o, f, v); }},
    Flag{"--mode", "lora|full", "LoRA adapters or full fine-tuning (default lora)", detail::model_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.mode = parse_mode(v, f); }},
    Flag{"--lora-rank", "R", "LoRA rank, 1 to 65536 (default 8); needs --mode lora", detail::model_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.lora_rank = detail::parse_positive(f, v); }},
    Flag{"--lora-targets", "LIST",
         "projections with adapters: comma-separated from q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
         "down_proj, or all-linear (default q_proj,v_proj, PEFT's default); needs --mode lora",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.lora_targets = parse_targets(v, f); }},
    Flag{"--grad-ckpt", "", "gradient checkpointing (non-reentrant): keep each layer's input only (default off)",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view, std::string_view) { o.gradient_checkpointing = true; }},
    Flag{"--logits-retained", "",
         "the training loop keeps the model output (and its logits) through backward (default off)",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view, std::string_view) { o.logits_retained = true; }},
    Flag{"--attention", "flash|mem-efficient|math",
         "the attention kernel; math builds the (seq x seq) score matrix (default flash)", detail::model_commands,
         "", [](CliOptions& o, std::string_view f, std::string_view v) { o.attention = parse_attention(v, f); }},
    Flag{"--stack", "hf-peft|libtorch",
         "hf-peft: HF transformers + PEFT + torch AdamW; libtorch: the probe's lean C++ step (default hf-peft)",
         detail::model_commands | bit(Command::replay), "",
         [](CliOptions& o, std::string_view f, std::string_view v) {
           o.stack = detail::parse_stack(f, v);
           o.stack_given = true;
         }},
    Flag{"--data", "FILE", "a measurements file (JSON lines, as in tests/data/)", bit(Command::replay), "",
         [](CliOptions& o, std::string_view, std::string_view v) { o.data = std::filesystem::path(v); }},
    Flag{"--trace", "FILE",
         "an allocator trace (tests/validation/trace_capture.py writes them; tests/data/traces/ has some)",
         bit(Command::replay), "",
         [](CliOptions& o, std::string_view, std::string_view v) { o.trace = std::filesystem::path(v); }},
    Flag{"--phase", "first|steady",
         "the peak of the first step only (no optimizer state yet) or of every step (default steady)",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.peak_over = parse_peak_over(v, f); }},
    Flag{"--precision", "bf16|fp16|fp32", "dtype of the weights and activations (default bf16)",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.precision = parse_precision(v, f); }},
    Flag{"--budget", "SIZE",
         "memory the step may use, e.g. 24GiB, 23.0 GB, 80e9 (units B, kB, MB, GB, TB, KiB, MiB, GiB, TiB); "
         "a step fits when its peak plus the allocator's margin is within it; required by max-batch and max-seq",
         detail::model_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) {
           const Bytes b = parse_size(v, f);
           if (b.count() == 0) throw InvalidInput(f, "must be more than 0 bytes, got '" + std::string(v) + "'");
           o.budget = b;
         }},
    Flag{"--world-size", "N",
         "data-parallel ranks, 1 to 65536 (default 1); --batch is then each rank's micro-batch and every "
         "figure is per rank",
         detail::rank_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.world_size = detail::parse_positive(f, v); }},
    Flag{"--sharding", "none|zero1|zero2|full|hybrid:K",
         "how the ranks share the state (default none: DDP when --world-size is above 1): zero1 partitions "
         "AdamW's moments, zero2 also the grads (ZeRO stages 1 and 2, with DeepSpeed's buffers but the stack's "
         "dtypes: DeepSpeed's fp32 master weights are not counted), full also the weights (FSDP2 fully_shard), "
         "hybrid:K shards within groups of K ranks (K divides --world-size) and replicates across them",
         detail::rank_commands, "",
         [](CliOptions& o, std::string_view f, std::string_view v) { o.sharding = parse_sharding(v, f); }},
    Flag{"--instruments", "",
         "measure instead of checking steps: bytes per logits element of the loss (bf16 and fp32-upcast) "
         "across vocabularies, the extra memory of each SDPA backend and of the default, the stack record",
         bit(Command::probe), "", [](CliOptions& o, std::string_view, std::string_view) { o.instruments = true; }},
    Flag{"--trace-out", "FILE",
         "also record each step's allocator trace (every request and free of the build and two steps, with "
         "phase and layer marks) and write it to FILE as JSON lines, for tests/validation/trace_program.py",
         bit(Command::probe), "",
         [](CliOptions& o, std::string_view, std::string_view v) { o.trace_out = std::filesystem::path(v); }},
    Flag{"--repeats", "N", "run each step N times, 1 to 100, to show the spread (default 1)", bit(Command::probe), "",
         [](CliOptions& o, std::string_view f, std::string_view v) {
           o.repeats = detail::parse_positive(f, v);
           if (o.repeats > 100) throw InvalidInput(f, "must be at most 100, got " + std::string(v));
         }},
    Flag{"--json", "", "print one JSON object instead of text",
         detail::model_commands | bit(Command::presets) | bit(Command::replay),
         "print JSON lines instead of text: one object per line, a line per step",
         [](CliOptions& o, std::string_view, std::string_view) { o.json = true; }},
};

/// The subcommand named `name`, if any.
constexpr const CommandInfo* find_command(std::string_view name) {
  for (const auto& c : commands)
    if (c.name == name) return &c;
  return nullptr;
}
/// The entry of a subcommand.
constexpr const CommandInfo& info(Command command) {
  for (const auto& c : commands)
    if (c.command == command) return c;
  return commands.front();
}

namespace detail {

inline std::string command_list() {
  std::string out;
  for (const auto& c : commands) {
    if (!out.empty()) out += ", ";
    out += c.name;
  }
  return out;
}

/// Checks that hold between flags, after all of them are read.
inline void check_combinations(const CliOptions& o) {
  if (o.command == Command::replay) {
    if (o.data && o.trace) throw InvalidInput("--trace", "give either --data or --trace, not both");
    if (!o.data && !o.trace)
      throw InvalidInput("--data", "required by replay (a measurements file, e.g. tests/data/hf_steps.jsonl), "
                                   "or give --trace FILE");
    if (o.trace && o.stack_given) throw InvalidInput("--stack", "does not apply to --trace (a trace has no prediction)");
  }
  if (o.trace_out && o.instruments) throw InvalidInput("--trace-out", "records checked steps, not --instruments");
  if ((bit(o.command) & model_commands) == 0) return;
  if (o.model && o.config) throw InvalidInput("--config", "give either --model or --config, not both");
  if (!o.model && !o.config && !o.instruments)
    throw InvalidInput("--model", "a model is required: --model NAME (a built-in model, see `vramfit presets`) or "
                                  "--config PATH (a Hugging Face config.json)");
  if (o.mode == Mode::full) {
    if (o.lora_rank) throw InvalidInput("--lora-rank", "needs --mode lora (full fine-tuning has no adapters)");
    if (o.lora_targets) throw InvalidInput("--lora-targets", "needs --mode lora (full fine-tuning has no adapters)");
  }
  if (!o.budget && (o.command == Command::max_batch || o.command == Command::max_seq))
    throw InvalidInput("--budget", "required by " + std::string(info(o.command).name) +
                                       " (the memory the step may use, e.g. --budget 24GiB)");
}

}  // namespace detail

/**
 * Parses the arguments after the program name. Throws `InvalidInput` naming the flag (or
 * "subcommand") at fault: unknown subcommands and flags, a flag given twice or without its value,
 * bad numbers, sizes and words, and flags that contradict each other.
 *
 *     const std::vector<std::string_view> args = {"predict", "--model", "Qwen2.5-0.5B", "--seq", "4096"};
 *     const CliOptions options = parse_command_line(args);
 */
inline CliOptions parse_command_line(std::span<const std::string_view> args) {
  CliOptions o;
  if (args.empty()) return o;  // the report
  const std::string_view first = args.front();
  if (first == "--help" || first == "-h") {
    o.help = true;
    return o;
  }
  if (first == "--version") {
    o.version = true;
    return o;
  }
  if (first.starts_with("-"))
    throw InvalidInput(first, "unknown option; expected a subcommand (" + detail::command_list() +
                                  ") or --help or --version");
  const CommandInfo* command = find_command(first);
  if (command == nullptr)
    throw InvalidInput("subcommand", "unknown subcommand '" + std::string(first) + "' (allowed: " +
                                         detail::command_list() + "; see vramfit --help)");
  o.command = command->command;
  if (o.command == Command::probe && !probe_available)
    throw InvalidInput("probe", "this build has no probe (LibTorch was not found at configure time)");

  const auto rest = args.subspan(1);
  if (std::any_of(rest.begin(), rest.end(), [](std::string_view a) { return a == "--help" || a == "-h"; })) {
    o.help = true;
    return o;
  }

  std::vector<std::string_view> seen;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const std::string_view arg = rest[i];
    if (!arg.starts_with("--"))
      throw InvalidInput(arg, std::string(arg.starts_with("-") ? "unknown flag" : "unexpected argument") +
                                  " (see vramfit " + std::string(command->name) + " --help)");
    const auto equals = arg.find('=');
    const std::string_view name = arg.substr(0, equals);
    const auto flag = std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == name; });
    if (flag == flags.end())
      throw InvalidInput(name, "unknown flag for " + std::string(command->name) + " (see vramfit " +
                                   std::string(command->name) + " --help)");
    if ((flag->commands & bit(o.command)) == 0)
      throw InvalidInput(name, "not taken by " + std::string(command->name) + " (see vramfit " +
                                   std::string(command->name) + " --help)");
    if (std::find(seen.begin(), seen.end(), flag->name) != seen.end())
      throw InvalidInput(name, "given twice; give it once");
    seen.push_back(flag->name);

    std::string_view value;
    if (flag->value.empty()) {
      if (equals != std::string_view::npos) throw InvalidInput(name, "takes no value");
    } else if (equals != std::string_view::npos) {
      value = arg.substr(equals + 1);
      if (value.empty()) throw InvalidInput(name, "missing value (expected " + std::string(flag->value) + ")");
    } else {
      if (i + 1 >= rest.size() || rest[i + 1].starts_with("--"))
        throw InvalidInput(name, "missing value (expected " + std::string(flag->value) + ")");
      value = rest[++i];
    }
    flag->apply(o, flag->name, value);
  }
  detail::check_combinations(o);
  return o;
}

/// The flag a library error is about: "batch" is --batch, "lora rank" is --lora-rank; a shape
/// field of a loaded config names --config. Other fields ("--budget", "config.json: vocab_size")
/// are already what the user wrote.
inline std::string flag_for_field(std::string_view field, const CliOptions& o) {
  constexpr std::array<std::array<std::string_view, 2>, 6> step_fields = {{{"batch", "--batch"},
                                                                          {"seq", "--seq"},
                                                                          {"lora rank", "--lora-rank"},
                                                                          {"lora targets", "--lora-targets"},
                                                                          {"world size", "--world-size"},
                                                                          {"shard group", "--sharding"}}};
  for (const auto& f : step_fields)
    if (f[0] == field) return std::string(f[1]);
  constexpr std::array<std::string_view, 7> shape_fields = {"vocab",  "hidden",   "intermediate", "layers",
                                                            "heads", "kv_heads", "head_dim"};
  if (std::find(shape_fields.begin(), shape_fields.end(), field) != shape_fields.end())
    return std::string(o.config ? "--config: " : "--model: ") + std::string(field);
  return std::string(field);
}

namespace detail {

/// `text` broken into lines of at most `width` characters (a longer word gets a line of its
/// own), each starting with `indent`.
inline std::string wrap(std::string_view text, std::string_view indent, std::size_t width = 78) {
  std::string out, line(indent);
  std::size_t words = 0;
  while (!text.empty()) {
    const auto space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
    if (word.empty()) continue;
    if (words > 0 && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent);
      words = 0;
    }
    if (words++ > 0) line += ' ';
    line += word;
  }
  return out + line + "\n";
}

}  // namespace detail

/// The help of the whole program.
inline std::string top_level_help(std::string_view version) {
  std::string out = fmt::format(
      "vramfit {}: predicts the peak GPU memory of one fine-tuning step of a decoder-only\n"
      "language model, before anything runs, and whether it fits a card.\n\n"
      "usage: vramfit                      a report on popular models and cards\n"
      "       vramfit SUBCOMMAND [flags]\n"
      "       vramfit SUBCOMMAND --help    the flags of a subcommand\n"
      "       vramfit --version\n\nsubcommands:\n",
      version);
  for (const auto& c : commands)
    out += fmt::format("  {:<10}  {}{}\n", c.name, c.summary,
                       c.command == Command::probe && !probe_available
                           ? "\n              (not in this build: LibTorch was not found)"
                           : "");
  out +=
      "\nexamples:\n"
      "  vramfit predict --model Qwen2.5-0.5B --seq 4096 --budget 24GiB\n"
      "  vramfit max-batch --model Llama-3.1-8B --lora-targets all-linear --grad-ckpt --budget 80GB\n"
      "  vramfit sweep --config path/to/config.json --seq 1024,2048,4096 --batch 1,4\n"
      "\nSizes: GB is 10^9 bytes, GiB 2^30. The peak is the CUDA caching allocator's peak of allocated\n"
      "bytes (torch.cuda.max_memory_allocated); a card must also hold the CUDA context.\n"
      "\nexit status: 0 success; 2 bad input (one line on stderr naming the flag); 3 with --budget:\n"
      "the step does not fit\n";
  return out;
}

/// The help of one subcommand: its usage and every flag it takes.
inline std::string command_help(Command command) {
  const CommandInfo& c = info(command);
  std::string out = fmt::format("usage: vramfit {} {}\n\n{}{}.\n\nflags:\n", c.name, c.usage,
                                static_cast<char>(c.summary.front() - 'a' + 'A'), c.summary.substr(1));
  const bool lists = (bit(command) & detail::list_commands) != 0;
  for (const auto& f : flags)
    if (f.commands & bit(command)) {
      out += fmt::format("  {}", f.name);
      const bool list = lists && !f.list_help.empty();
      if (!f.value.empty()) out += fmt::format(" {}{}", f.value, list ? "[,N...]" : "");
      out += "\n" + detail::wrap(list ? f.list_help : f.help, "        ");
    }
  out += "  --help, -h\n        print this help\n";
  switch (command) {
    case Command::predict:
    case Command::sweep:
    case Command::probe:
      out += "\nexit status: 0 success, 2 bad input, 3 with --budget: a step does not fit\n";
      break;
    case Command::max_batch:
    case Command::max_seq:
      out += "\nexit status: 0 success, 2 bad input, 3 not even 1 fits the budget\n";
      break;
    case Command::replay:
      out += "\nexit status: 0 every prediction at or above the real peak (--trace: the model gives the measured\n"
             "peaks exactly), 2 bad input, 3 an under-prediction (--trace: a peak differs)\n";
      break;
    case Command::presets:
    case Command::report:
      out += "\nexit status: 0 success, 2 bad input\n";
      break;
  }
  return out;
}

}  // namespace vramfit::cli
