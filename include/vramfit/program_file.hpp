#pragma once
/// @file program_file.hpp
/// Step programs as data: the file that holds one stack's recorded step programs
/// (detail/step_program.hpp), read at run time, so that no translation unit compiles them and a
/// user can bring programs recorded on their own stack (`vramfit predict --programs FILE`).
///
/// The format, version 3: UTF-8 text, one record per line, fields separated by single spaces;
/// lines that begin with '#' are comments.
///
///     vramfit-programs 3
///     stack hf-trainer                    the stack the programs are for: hf-peft, hf-trainer or libtorch
///     gpu NVIDIA H200                     where they were recorded: the GPU,
///     software torch 2.11.0+cu130, ...    and the software (the rest of the line, free text)
///     sections N                          then N lines "s INT...": integer runs programs share
///     programs M                          then M lines, one per kind of step:
///     p ARCH TIED HEAD_DIMS MODE TARGETS CHECKPOINTING LOGITS_KEPT OPTIMIZER DROPOUT WEIGHTS : ITEM...
///     end
///
/// ARCH is llama (no bias) or qwen2 (q/k/v bias); TIED, CHECKPOINTING and LOGITS_KEPT are 0 or 1;
/// HEAD_DIMS is a bit set of the head_dims the program was checked at (1: 64, 2: 128); MODE is
/// lora or full; TARGETS the LoRA targets as recorded (q_proj,v_proj, q_proj,k_proj,v_proj,o_proj
/// or all-linear), "-" for full; OPTIMIZER one of vramfit's `--optim` names; DROPOUT 1 where the
/// LoRA adapters ran dropout above 0, else 0 (always 0 for full); WEIGHTS the weights' dtype, bf16
/// or fp32 (fp32 under the Trainer's bf16 autocast: mixed precision). The program is the
/// concatenation of its ITEMs, each "#K" (section K) or an integer: the flat form of
/// detail/step_program.hpp. Older versions are read as they were written: version 2 has no
/// WEIGHTS (the weights were the step's bf16), version 1 neither OPTIMIZER nor DROPOUT (AdamW, no
/// dropout). tests/validation/trace_program.py --programs writes the files from marked
/// allocator traces; the built-in ones are installed in share/vramfit/programs/
/// (`builtin_programs`).

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "vramfit/error.hpp"
#include "vramfit/step.hpp"
#include "vramfit/detail/read_file.hpp"
#include "vramfit/detail/step_program.hpp"

namespace vramfit {

/// One recorded kind of step and its program.
struct ProgramEntry {
  std::string arch;             ///< "llama" (no bias) or "qwen2" (q/k/v bias)
  bool tied = false;            ///< tied embeddings
  std::uint64_t head_dims = 0;  ///< bit 0: checked at head_dim 64; bit 1: at 128
  std::string mode;             ///< "lora" or "full"
  std::string targets;          ///< LoRA targets as recorded; empty for full
  bool checkpointing = false;
  bool logits_retained = false;
  Optimizer optimizer = Optimizer::adamw;  ///< what the recorded loop stepped with
  bool dropout = false;                    ///< LoRA dropout above 0 in the recording
  Precision weights = Precision::bf16;     ///< the weights' dtype in the recording
  std::vector<std::int32_t> program;  ///< the flat form (detail/step_program.hpp)
  std::size_t line = 0;               ///< its line in the file
};

/// One stack's step programs, read from a file (`parse_programs`, `load_programs`).
struct ProgramSet {
  std::string stack;     ///< "hf-peft", "hf-trainer" or "libtorch" (`to_string(Stack)`)
  std::string gpu;       ///< where they were recorded
  std::string software;  ///< the software they were recorded with
  std::string source;    ///< the file they were read from
  std::vector<ProgramEntry> entries;
  std::vector<detail::StepProgram> parsed;  ///< entries[k]'s program, parsed
};

namespace detail {

/// Bounds that keep a damaged or hostile file from asking for unbounded memory (a section can be
/// referenced any number of times): about 40 to 100 times what the built-in files hold (hf-peft:
/// 327 sections, 48 programs, 418,724 integers in all).
struct ProgramFileLimits {
  static constexpr std::size_t bytes = std::size_t{64} << 20;
  static constexpr std::size_t sections = 1u << 16;
  static constexpr std::size_t programs = 4096;
  static constexpr std::size_t program_ints = std::size_t{1} << 24;  ///< over all programs: 64 MiB
};

class ProgramFileReader {
 public:
  ProgramFileReader(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  ProgramSet read() {
    ProgramSet out;
    out.source = std::string(source_);
    const std::string_view magic = next_line("the header 'vramfit-programs 3'");
    if (!magic.starts_with("vramfit-programs "))
      fail("must begin with 'vramfit-programs 3' (a vramfit step-program file), got '" + clip(magic) + "'");
    version_ = number(magic.substr(17), "the version", 1u << 30);
    if (version_ < 1 || version_ > 3)
      fail("version " + std::to_string(version_) + " is not supported (this vramfit reads versions 1 to 3)");
    out.stack = std::string(keyed("stack"));
    if (out.stack != "hf-peft" && out.stack != "hf-trainer" && out.stack != "libtorch")
      fail("stack must be hf-peft, hf-trainer or libtorch, got '" + clip(out.stack) + "'");
    if (out.stack == "hf-trainer" && version_ < 3)
      fail("the Trainer's programs name their weights: stack hf-trainer needs version 3, got version " +
           std::to_string(version_));
    out.gpu = std::string(keyed("gpu"));
    out.software = std::string(keyed("software"));

    const std::size_t n_sections = number(keyed("sections"), "sections", ProgramFileLimits::sections);
    std::vector<std::vector<std::int32_t>> sections(n_sections);
    for (auto& section : sections) {
      std::string_view line = next_line("a section line 's INT...'");
      if (!line.starts_with("s ") && line != "s") fail("must be a section 's INT...', got '" + clip(line) + "'");
      line.remove_prefix(1);
      while (!line.empty()) section.push_back(integer(word(line)));
    }

    const std::size_t n_programs = number(keyed("programs"), "programs", ProgramFileLimits::programs);
    out.entries.reserve(n_programs);
    for (std::size_t k = 0; k < n_programs; ++k) out.entries.push_back(entry(sections));
    if (next_line("'end'") != "end") fail("must be 'end' (after the programs the file announced)");
    if (!rest_is_empty()) fail("follows 'end': nothing may come after it");

    out.parsed.reserve(out.entries.size());
    for (const ProgramEntry& e : out.entries) {
      line_ = e.line;
      try {
        out.parsed.emplace_back(e.program);
      } catch (const InvalidInput& error) {
        fail(std::string("the program is not a valid step program: ") + error.what());
      }
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw InvalidInput(std::string(source_) + ":" + std::to_string(line_), message);
  }
  static std::string clip(std::string_view s) {
    return s.size() > 60 ? std::string(s.substr(0, 60)) + "..." : std::string(s);
  }

  /// The next line, without its newline (and a '\r' before it); nullopt at the end of the text.
  std::optional<std::string_view> raw_line() {
    if (at_ >= text_.size()) return std::nullopt;
    const std::size_t end = std::min(text_.find('\n', at_), text_.size());
    std::string_view line = text_.substr(at_, end - at_);
    at_ = end + 1;
    ++line_;
    if (line.ends_with('\r')) line.remove_suffix(1);
    return line;
  }
  /// The next line that is not a comment.
  std::string_view next_line(std::string_view expected) {
    while (const auto line = raw_line())
      if (!line->starts_with('#')) return *line;
    line_ += 1;
    fail("the file ends early: expected " + std::string(expected));
  }
  /// Whether only empty lines and comments are left.
  bool rest_is_empty() {
    while (const auto line = raw_line())
      if (!line->empty() && !line->starts_with('#')) return false;
    return true;
  }
  /// The value of a "KEY VALUE" line (VALUE: the rest of the line, not empty).
  std::string_view keyed(std::string_view key) {
    const std::string form = std::string(key).append(" ...");  // (not "'" + string: GCC 12's -Wrestrict misfires)
    std::string_view line = next_line("'" + form + "'");
    if (!line.starts_with(key) || line.size() < key.size() + 2 || line[key.size()] != ' ')
      fail("must be '" + form + "', got '" + clip(line) + "'");
    return line.substr(key.size() + 1);
  }
  /// The next word of `line` (which begins with the space before it).
  std::string_view word(std::string_view& line) {
    if (line.empty() || line[0] != ' ' || line.size() < 2 || line[1] == ' ')
      fail("fields must be separated by single spaces");
    line.remove_prefix(1);
    const std::size_t end = std::min(line.find(' '), line.size());
    const std::string_view w = line.substr(0, end);
    line.remove_prefix(end);
    return w;
  }
  std::uint64_t number(std::string_view s, std::string_view what, std::uint64_t limit) {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size())
      fail(std::string(what) + " must be a non-negative integer, got '" + clip(s) + "'");
    if (v > limit) fail(std::string(what) + " must be at most " + std::to_string(limit) + ", got " + std::to_string(v));
    return v;
  }
  std::int32_t integer(std::string_view s) {
    std::int32_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || s.empty())
      fail("'" + clip(s) + "' is not a 32-bit integer");
    return v;
  }
  bool flag(std::string_view s, std::string_view what) {
    if (s == "0" || s == "1") return s == "1";
    fail(std::string(what) + " must be 0 or 1, got '" + clip(s) + "'");
  }

  ProgramEntry entry(const std::vector<std::vector<std::int32_t>>& sections) {
    std::string_view line = next_line("a program line 'p ...'");
    if (!line.starts_with("p ")) fail("must be a program 'p ARCH TIED HEAD_DIMS MODE TARGETS ...', got '" + clip(line) + "'");
    line.remove_prefix(1);
    ProgramEntry e;
    e.line = line_;
    e.arch = std::string(word(line));
    if (e.arch != "llama" && e.arch != "qwen2") fail("the architecture must be llama or qwen2, got '" + clip(e.arch) + "'");
    e.tied = flag(word(line), "tied");
    e.head_dims = number(word(line), "head_dims", 3);
    if (e.head_dims == 0) fail("head_dims must name a head_dim the program was checked at (1: 64, 2: 128, 3: both)");
    e.mode = std::string(word(line));
    if (e.mode != "lora" && e.mode != "full") fail("the mode must be lora or full, got '" + clip(e.mode) + "'");
    e.targets = std::string(word(line));
    if ((e.mode == "full") != (e.targets == "-"))
      fail("targets must be '-' for full fine-tuning and only then, got '" + clip(e.targets) + "'");
    if (e.targets == "-") e.targets.clear();
    e.checkpointing = flag(word(line), "checkpointing");
    e.logits_retained = flag(word(line), "logits kept");
    if (version_ >= 2) {
      const std::string_view optimizer = word(line);
      bool known = false;
      for (const auto& [o, name] : EnumNames<Optimizer>::names)
        if (optimizer == name) e.optimizer = o, known = true;
      if (!known) fail("the optimizer must be one of vramfit's --optim names (adamw, adamw-fused, adafactor, "
                       "sgd-momentum, sgd), got '" + clip(optimizer) + "'");
      e.dropout = flag(word(line), "dropout");
      if (e.dropout && e.mode == "full") fail("dropout must be 0 for full fine-tuning (it is LoRA's)");
    }
    if (version_ >= 3) {
      const std::string_view weights = word(line);
      if (weights != "bf16" && weights != "fp32") fail("the weights must be bf16 or fp32, got '" + clip(weights) + "'");
      e.weights = weights == "fp32" ? Precision::fp32 : Precision::bf16;
    }
    if (word(line) != ":") fail("the program's items must follow ' : '");
    while (!line.empty()) {
      const std::string_view item = word(line);
      if (item.starts_with('#')) {
        const std::size_t k = number(item.substr(1), "a section reference", sections.size());
        if (k >= sections.size())
          fail("section #" + std::to_string(k) + " does not exist (" + std::to_string(sections.size()) + " sections)");
        if (sections[k].size() > ProgramFileLimits::program_ints - total_ints_) too_long();
        total_ints_ += sections[k].size();
        e.program.insert(e.program.end(), sections[k].begin(), sections[k].end());
      } else {
        if (total_ints_ == ProgramFileLimits::program_ints) too_long();
        ++total_ints_;
        e.program.push_back(integer(item));
      }
    }
    return e;
  }
  [[noreturn]] void too_long() const {
    fail("the programs are longer than " + std::to_string(ProgramFileLimits::program_ints) + " integers in all");
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t at_ = 0;
  std::size_t line_ = 0;
  std::size_t total_ints_ = 0;  ///< over the programs read so far
  std::uint64_t version_ = 0;   ///< the file's format version (1 to 3)
};

/// The directory the built-in program files are read from: VRAMFIT_PROGRAMS_DIR in the
/// environment, else what `use_builtin_programs_from` set, else the macro VRAMFIT_PROGRAMS_DIR
/// (the CMake target vramfit::vramfit defines it: the source tree's, or the installed package's
/// share/vramfit/programs), else none.
inline std::string& builtin_programs_override() {
  static std::string dir;
  return dir;
}
}  // namespace detail

/// Reads a step-program file's text; `source` names it in errors ("FILE:LINE: ..."). Throws
/// `InvalidInput` for a malformed file or a program that is not a valid step program.
inline std::shared_ptr<const ProgramSet> parse_programs(std::string_view text, std::string_view source) {
  return std::make_shared<const ProgramSet>(detail::ProgramFileReader(text, source).read());
}

/// Reads a step-program file. An unreadable file is an `InvalidInput` on `field` ("--programs")
/// with the path and the operating system's reason.
inline std::shared_ptr<const ProgramSet> load_programs(const std::filesystem::path& path,
                                                       std::string_view field = "--programs") {
  const std::string text = detail::read_bounded_file(path, field, detail::ProgramFileLimits::bytes,
                                                     "larger than 64 MiB: not a step-program file");
  return parse_programs(text, path.string());
}

/// Reads the built-in programs from `dir` from now on (the CLI: the share/vramfit/programs beside
/// its executable). Call it before the first estimate; VRAMFIT_PROGRAMS_DIR in the environment
/// still wins.
inline void use_builtin_programs_from(const std::filesystem::path& dir) { detail::builtin_programs_override() = dir.string(); }

/// The directory the built-in programs are read from (see `use_builtin_programs_from`); empty
/// when none is set.
inline std::string builtin_programs_dir() {
  if (const char* env = std::getenv("VRAMFIT_PROGRAMS_DIR"); env != nullptr && *env != '\0') return env;
  if (!detail::builtin_programs_override().empty()) return detail::builtin_programs_override();
#ifdef VRAMFIT_PROGRAMS_DIR
  return VRAMFIT_PROGRAMS_DIR;
#else
  return {};
#endif
}

/// A stack's built-in programs, read once from `builtin_programs_dir()`/STACK.programs; `set`
/// is null, and `why` says why, when the file is not there or cannot be read.
struct BuiltinPrograms {
  std::shared_ptr<const ProgramSet> set;
  std::string why;
};

/// The built-in programs of the stack named `stack` ("hf-peft", "hf-trainer", "libtorch"), read on
/// first use.
inline const BuiltinPrograms& builtin_programs(std::string_view stack) {
  const auto load = [](std::string_view name) {
    BuiltinPrograms out;
    const std::string dir = builtin_programs_dir();
    if (dir.empty()) {
      out.why = "no built-in step programs: VRAMFIT_PROGRAMS_DIR is not set (share/vramfit/programs of the installed package)";
      return out;
    }
    const std::filesystem::path path = std::filesystem::path(dir) / (std::string(name) + ".programs");
    std::error_code absent;
    if (name == "hf-trainer" && !std::filesystem::exists(path, absent)) {  // an install without the Trainer's
      out.why = "no step program of the Trainer's step is built in; the closed form bounds it (--programs with an "
                "hf-trainer file simulates it)";
      return out;
    }
    try {
      out.set = load_programs(path, "VRAMFIT_PROGRAMS_DIR");
      if (out.set->stack != name) {
        out.why = "the built-in step programs in " + path.string() + " are for " + out.set->stack + ", not " +
                  std::string(name);
        out.set = nullptr;
      }
    } catch (const InvalidInput& e) {
      out.why = std::string("no built-in step programs: ") + e.what();
    }
    return out;
  };
  if (stack == "libtorch") {
    static const BuiltinPrograms libtorch = load("libtorch");
    return libtorch;
  }
  if (stack == "hf-trainer") {
    static const BuiltinPrograms hf_trainer = load("hf-trainer");
    return hf_trainer;
  }
  static const BuiltinPrograms hf_peft = load("hf-peft");
  return hf_peft;
}

}  // namespace vramfit
