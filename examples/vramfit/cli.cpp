// The vramfit command line: the CLI11 app with every subcommand, the help's layout, and every
// error as one line naming the flag (exit 2). `vramfit --help` and `vramfit SUBCOMMAND --help` say
// how to use it.

#include "cli.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "vramfit/config_json.hpp"

#ifndef VRAMFIT_VERSION
#error "VRAMFIT_VERSION must be defined by the build (examples/CMakeLists.txt)"
#endif

namespace vramfit::cli {
namespace {

/// `text` broken into lines of at most `width` characters (a longer word gets a line of its own),
/// each starting with `indent`.
std::string wrap(std::string_view text, std::string_view indent, std::size_t width = 78) {
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

std::vector<const CLI::App*> subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

/// The subcommands' names: "predict, max-batch, ...".
std::string command_list(const CLI::App& app) {
  std::string out;
  for (const CLI::App* c : subcommands(app)) out += (out.empty() ? "" : ", ") + c->get_name();
  return out;
}

/// The help's layout: the program's (usage, subcommands, examples) and each subcommand's (usage,
/// what it does, every flag with its value and meaning, the exit statuses).
class Help final : public CLI::FormatterBase {
public:
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    return app->get_parent() == nullptr ? program(*app) : command(*app);
  }

private:
  static std::string program(const CLI::App& app) {
    std::string out = fmt::format(
        "vramfit {}: predicts the peak GPU memory of one fine-tuning step of a decoder-only\n"
        "language model, before anything runs, and whether it fits a card.\n\n"
        "usage: vramfit                      a report on popular models and cards\n"
        "       vramfit SUBCOMMAND [flags]\n"
        "       vramfit SUBCOMMAND --help    the flags of a subcommand\n"
        "       vramfit --version\n\nsubcommands:\n",
        VRAMFIT_VERSION);
    for (const CLI::App* c : subcommands(app))
      out += fmt::format("  {:<10}  {}{}\n", c->get_name(), c->get_description(),
                         c->get_name() == "probe" && !probe_available
                             ? "\n              (not in this build: LibTorch was not found)"
                             : "");
    out +=
        "\nexamples:\n"
        "  vramfit predict --model Qwen2.5-0.5B --seq 4096 --budget 24GiB\n"
        "  vramfit max-batch --model Llama-3.1-8B --lora-targets all-linear --grad-ckpt --budget 80GB\n"
        "  vramfit sweep --config path/to/config.json --seq 1024,2048,4096 --batch 1,4\n"
        "\nSizes: GB is 10^9 bytes, GiB 2^30. The peak is the CUDA caching allocator's peak of allocated\n"
        "bytes (torch.cuda.max_memory_allocated); a card must also hold the CUDA context.\n"
        "\nexit status: 0 success; 2 bad input (one line on stderr naming the flag, and with --json\n"
        "{\"error\": ..., \"field\": ...} on stdout); 3 with --budget: the step does not fit (sweep: only\n"
        "without --json)\n";
    return out;
  }

  std::string command(const CLI::App& app) const {
    const std::string summary = app.get_description();
    std::string out = fmt::format("usage: vramfit {} {}\n\n{}{}.\n\nflags:\n", app.get_name(),
                                  get_label("usage " + app.get_name()),
                                  static_cast<char>(summary.front() - 'a' + 'A'), summary.substr(1));
    for (const CLI::Option* flag : app.get_options()) {
      if (flag == app.get_help_ptr()) continue;  // last, below
      out += "  " + flag->get_name();
      if (const std::string value = flag->get_type_name(); !value.empty()) out += " " + value;
      out += "\n" + wrap(flag->get_description(), "        ");
    }
    return out + "  --help, -h\n        print this help\n\n" + app.get_footer() + "\n";
  }
};

#ifndef VRAMFIT_WITH_PROBE
/// `vramfit probe` in a build without LibTorch: its --help says so, and running it is bad input
/// naming `probe`.
class NoProbe final : public Command {
public:
  NoProbe(CLI::App& parent, BadValues&)
      : Command(add_command(parent, "probe", std::string(probe_usage), std::string(probe_summary), "")) {
    app_->footer("not in this build: LibTorch (2.8 or later, built with CUDA) was not found when vramfit was\n"
                 "configured, so `vramfit probe` exits 2 (bad input) here");
  }
  void check_build() const override {
    throw InvalidInput("probe", "this build has no probe (LibTorch was not found at configure time)");
  }
  int run(std::FILE*, std::FILE*) const override { return exit_bad_input; }
};
#endif

/// The first argument the program takes no subcommand or option for.
InvalidInput unknown_at_top(const CLI::App& app, std::string_view arg) {
  if (arg.starts_with("-"))
    return InvalidInput(arg, "unknown option; expected a subcommand (" + command_list(app) +
                                 ") or --help or --version");
  return InvalidInput("subcommand", "unknown subcommand '" + std::string(arg) + "' (allowed: " + command_list(app) +
                                        "; see vramfit --help)");
}

/// The first argument a subcommand does not take; a flag another subcommand takes says so.
InvalidInput not_taken(const CLI::App& app, const CLI::App& command, std::string_view arg) {
  const std::string see = " (see vramfit " + command.get_name() + " --help)";
  if (arg.empty()) return InvalidInput("arguments", "unexpected empty argument ''" + see);
  // A stray word is quoted after the field "arguments": as the field, it could read as anything
  // (the fuzzer's ":-conf--model" made the message start with a colon).
  if (!arg.starts_with("-")) return InvalidInput("arguments", "unexpected argument '" + std::string(arg) + "'" + see);
  if (!arg.starts_with("--")) return InvalidInput(arg, "unknown flag" + see);
  const std::string flag(arg.substr(0, arg.find('=')));
  const auto subs = subcommands(app);
  const bool elsewhere = std::any_of(subs.begin(), subs.end(), [&](const CLI::App* c) {
    return c->get_option_no_throw(flag) != nullptr;
  });
  return InvalidInput(flag, (elsewhere ? "not taken by " : "unknown flag for ") + command.get_name() + see);
}

/// A CLI11 parse error in vramfit's words, naming the flag. The messages are CLI11 2.x's:
/// "--batch: At Most 1 required but received 2", "--seq: 1 required N missing",
/// "json was given a disallowed flag override".
InvalidInput from_cli11(const CLI::ParseError& e) {
  const std::string_view what = e.what();
  constexpr std::string_view override_message = " was given a disallowed flag override";
  if (what.ends_with(override_message))
    return InvalidInput("--" + std::string(what.substr(0, what.size() - override_message.size())), "takes no value");
  const auto colon = what.find(": ");
  if (!what.starts_with("-") || colon == std::string_view::npos) return InvalidInput("arguments", what);
  const std::string_view flag = what.substr(0, colon), rest = what.substr(colon + 2);
  if (constexpr std::string_view received = "but received "; rest.starts_with("At Most")) {
    const std::string_view times = rest.substr(std::min(rest.size(), rest.find(received) + received.size()));
    return InvalidInput(flag, "given " + (times == "2" ? std::string("twice") : std::string(times) + " times") +
                                  "; give it once");
  }
  constexpr std::string_view required = "required ", missing = " missing";
  if (const auto at = rest.find(required); at != std::string_view::npos && rest.ends_with(missing)) {
    const std::size_t from = at + required.size();
    return InvalidInput(flag, "missing value (expected " +
                                  std::string(rest.substr(from, rest.size() - missing.size() - from)) + ")");
  }
  return InvalidInput(flag, rest);
}

/// The flag a library error is about: "batch" is --batch, "lora rank" is --lora-rank; a shape
/// field names --config with its config.json key (config_json.hpp's table), or --model. Other
/// fields ("--budget", "config.json: vocab_size") are already what the user wrote.
std::string flag_for_field(std::string_view field, bool from_config) {
  if (field == "shard group") return "--sharding";
  // A step field's flag is its name with dashes: "lora rank" is --lora-rank.
  constexpr std::array<std::string_view, 9> step_fields = {"batch",        "seq",        "lora rank",
                                                           "lora targets", "lora dropout", "world size",
                                                           "grad accum",   "weights",    "optim"};
  if (std::find(step_fields.begin(), step_fields.end(), field) != step_fields.end()) {
    std::string flag = "--" + std::string(field);
    std::replace(flag.begin(), flag.end(), ' ', '-');
    return flag;
  }
  for (const auto& [shape_field, json_key] : vramfit::detail::hf::shape_json_names)
    if (shape_field == field)
      return from_config ? "--config: " + std::string(json_key) : "--model: " + std::string(shape_field);
  return std::string(field);
}

/// One line of UTF-8, whatever the message holds: line breaks become spaces, bytes that are not
/// UTF-8 (a path from the command line) U+FFFD, so stderr and the JSON object say the same.
std::string one_line(std::string_view text) {
  std::string out = nlohmann::json::parse(json_text(nlohmann::json(std::string(text)))).get<std::string>();
  std::replace_if(out.begin(), out.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return out;
}

/// Where an error goes: the line on stderr, and with --json on the line also one JSON object on
/// stdout, {"error": message, "field": flag or null}, for scripts that read stdout.
struct ErrorOut {
  std::FILE* out;
  std::FILE* err;
  bool json;

  /// Prints the error; returns `status`.
  int report(std::string_view field, std::string_view message, int status) const {
    if (json) {
      const nlohmann::json j = {{"error", message}, {"field", field.empty() ? nlohmann::json(nullptr) : field}};
      fmt::print(out, "{}\n", json_text(j));
    }
    if (field.empty())
      fmt::print(err, "vramfit: error: {}\n", message);
    else
      fmt::print(err, "vramfit: error: {}: {}\n", field, message);
    return status;
  }

  /// "vramfit: error: FLAG: message"; returns the status of bad input.
  int fail(const InvalidInput& e, bool from_config) const {
    std::string_view message = e.what();
    if (message.starts_with(e.field() + ": ")) message.remove_prefix(e.field().size() + 2);
    return report(one_line(flag_for_field(e.field(), from_config)), one_line(message), exit_bad_input);
  }
};

/// Installed as PREFIX/bin/vramfit, the executable reads the built-in step programs installed
/// with it (PREFIX/share/vramfit/programs); elsewhere (a build tree) VRAMFIT_PROGRAMS_DIR's.
void use_installed_programs() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return;
  const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "vramfit" / "programs";
  if (std::filesystem::exists(installed / "hf-peft.programs", ec)) use_builtin_programs_from(installed);
}

}  // namespace

#ifndef VRAMFIT_WITH_PROBE
std::unique_ptr<Command> add_probe(CLI::App& app, BadValues& bad) { return std::make_unique<NoProbe>(app, bad); }
#endif

int run(std::span<const std::string_view> args, std::FILE* out, std::FILE* err) {
  use_installed_programs();
  CLI::App app("predicts the peak GPU memory of one fine-tuning step", "vramfit");
  app.formatter(std::make_shared<Help>());  // before the subcommands: they share it
  app.set_help_flag("-h,--help", "print this help");
  app.set_version_flag("--version", std::string("vramfit ") + VRAMFIT_VERSION);
  app.allow_extras();  // named by unknown_at_top
  app.require_subcommand(0, 1);
  BadValues bad;
  std::vector<std::unique_ptr<Command>> commands;
  for (auto add : {add_predict, add_max_batch, add_max_seq, add_sweep, add_presets, add_probe, add_replay})
    commands.push_back(add(app, bad));

  const Command* command = nullptr;
  const ErrorOut error{out, err, std::find(args.begin(), args.end(), "--json") != args.end()};
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
    for (const auto& c : commands)
      if (c->app().parsed()) command = c.get();
    if (command != nullptr) command->check_build();
    bad.throw_first();
    if (const auto extra = app.remaining(); !extra.empty()) throw unknown_at_top(app, extra.front());
    if (command == nullptr) return run_report(out);
    if (const auto extra = command->app().remaining(); !extra.empty())
      throw not_taken(app, command->app(), extra.front());
    command->check();
    return command->run(out, err);
  } catch (const CLI::CallForHelp&) {
    fmt::print(out, "{}", app.help());
    return exit_success;
  } catch (const CLI::CallForVersion& e) {
    fmt::print(out, "{}\n", e.what());
    return exit_success;
  } catch (const CLI::ParseError& e) {
    return error.fail(from_cli11(e), false);
  } catch (const InvalidInput& e) {
    const CLI::Option* config = command != nullptr ? command->app().get_option_no_throw("--config") : nullptr;
    return error.fail(e, config != nullptr && config->count() > 0);
  } catch (const Overflow& e) {
    return error.fail(InvalidInput("--batch/--seq", std::string("the step is too large for 64-bit byte counts (") +
                                                        e.what() + "); use a smaller batch or sequence length"),
                      false);
  } catch (const std::exception& e) {
    return error.report("", one_line(e.what()), 1);
  }
}

}  // namespace vramfit::cli
