#pragma once
/// @file replay.hpp
/// Reads measured steps (JSONL written by tests/validation/hf_harness.py and by the Probe) and
/// replays them against a predictor: predicted, real, pred/real, verdict. The CPU tests use it to
/// hold the accuracy band without a GPU; `vramfit replay FILE` prints the record's table.
/// Needs nlohmann-json (target vramfit::json).

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramfit/detail/allocator.hpp"
#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"
#include "vramfit/json.hpp"
#include "vramfit/model.hpp"
#include "vramfit/step.hpp"

namespace vramfit::detail {

/// One measured step: the model, the step, and the allocator's peaks.
struct MeasuredStep {
  std::string model;                  ///< the model's name as recorded
  std::string stack;                  ///< "hf-peft" or "libtorch"
  ModelShape shape;
  Step step;                          ///< as the row records it (peak_over: steady where it does not)
  Bytes real_first;                   ///< peak of allocated bytes over step 1, weights included
  Bytes real_steady;                  ///< the larger of steps 1 and 2
  std::uint64_t realised_seq = 0;     ///< the input width the step really ran
  std::size_t line = 0;               ///< line in the file, for messages
  /// Bytes allocated before the arm began (the harness's `pre_arm_allocated`: the cuBLAS
  /// workspaces, plus anything an earlier arm of the same process left), when recorded.
  std::optional<Bytes> baseline;
  /// The most the allocator reserved over the steps (the harness's `reserved_peak`), when recorded.
  std::optional<Bytes> reserved_peak;
  /// Whether the harness emptied the cache between the build and the first step (its
  /// `cache_emptied_after_build`; rows of arms sharing a process, which predate the field, did).
  bool cache_emptied_after_build = true;

  [[nodiscard]] Bytes real(PeakOver p) const { return p == PeakOver::first_step ? real_first : real_steady; }
};

/// One measured largest batch under an allocator cap (`set_per_process_memory_fraction`).
struct MeasuredMaxBatch {
  std::string model;
  std::string stack;
  ModelShape shape;
  Step step;                          ///< batch unused
  Bytes cap;                          ///< the cap in bytes
  std::uint64_t max_batch = 0;        ///< largest batch that ran two steps without OOM
  std::size_t line = 0;
};

/// Everything read from one measurements file.
struct Measurements {
  std::vector<MeasuredStep> steps;
  std::vector<MeasuredMaxBatch> max_batches;
  std::size_t skipped = 0;            ///< rows with an error, or of other kinds (stack, context)
};


/// Runs `read` (a reader of json.hpp), putting `where` in front of the field named by any
/// `InvalidInput` it throws: "file:line: lora_targets".
template <class Read>
decltype(auto) read_at(const std::string& where, Read&& read) {
  try {
    return read();
  } catch (const InvalidInput& e) {
    // what() is "field: message".
    throw InvalidInput(where + ": " + e.field(), std::string_view(e.what()).substr(e.field().size() + 2));
  }
}

inline const nlohmann::json& require(const nlohmann::json& row, const char* key, const std::string& where) {
  return read_at(where, [&]() -> const nlohmann::json& { return json_field(row, key); });
}
inline std::uint64_t require_count(const nlohmann::json& row, const char* key, const std::string& where) {
  return read_at(where, [&] { return json_count(row, key); });
}
/// The string at `key`, or `fallback` when it is absent or null.
inline std::string optional_string(const nlohmann::json& row, const char* key, const std::string& fallback,
                                   const std::string& where) {
  if (const auto it = row.find(key); it == row.end() || it->is_null()) return fallback;
  return read_at(where, [&] { return json_string(row, key); });
}

/// The longest line the JSON-lines readers take. A trace row holds a whole run's events (the
/// longest in tests/data/traces/, 21,626 events, is 368 KB); 16 MiB is ~45 times that. Past it the
/// input is no file vramfit wrote, and without a bound `/dev/zero` or a pipe would be read forever.
inline constexpr std::size_t max_line_bytes = std::size_t{16} << 20;

/// std::getline with a bound: reads line `line` of `source` from `in` into `text` (no '\n'); false
/// at the end of the input with nothing read. A line over `max_line_bytes`, or a read error, is an
/// `InvalidInput` on "<source>:<line>" (built only then: this runs per line).
inline bool read_line(std::istream& in, std::string& text, const std::string& source, std::size_t line) {
  const auto where = [&] { return source + ":" + std::to_string(line); };
  text.clear();
  std::streambuf& buffer = *in.rdbuf();
  for (;;) {
    int c = 0;
    try {  // std::getline catches a stream buffer's error (a directory's read: EISDIR); so does this
      c = buffer.sbumpc();
    } catch (const std::exception& e) {
      in.setstate(std::ios::badbit);
      throw InvalidInput(where(), std::string("cannot read it: ") + e.what());
    }
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return !text.empty();
    }
    if (c == '\n') return true;
    if (text.size() == max_line_bytes)
      throw InvalidInput(where(), "a line longer than 16 MiB: not a JSON-lines file vramfit reads");
    text.push_back(static_cast<char>(c));
  }
}

/// One line of a JSON-lines file as an object; `where` names the file and line in errors.
inline nlohmann::json parse_row(const std::string& text, const std::string& where) {
  nlohmann::json row;
  try {
    row = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw InvalidInput(where, std::string("not JSON: ") + e.what());
  }
  if (!row.is_object()) throw InvalidInput(where, "a row must be a JSON object");
  return row;
}

/// A trial row (hf_harness.py --trials) whose OOM the card decided, not the budget: PyTorch's
/// message reported less free memory than the request (the harness's `oom_cause` "device"; other
/// processes held the card). It says nothing of the budget, so replays skip it.
inline bool ran_out_of_card(const nlohmann::json& row) {
  return row.value("outcome", nlohmann::json()) == "oom" && row.value("oom_cause", nlohmann::json()) == "device";
}

/// The row's "shape" in the schema of json.hpp.
inline ModelShape shape_from(const nlohmann::json& row, const std::string& where) {
  const nlohmann::json& shape = require(row, "shape", where);
  if (!shape.is_object()) throw InvalidInput(where + ": shape", "must be a JSON object");
  return read_at(where + ": shape", [&] { return shape.get<ModelShape>(); });
}

/// The step the row's top-level fields give, in the schema of json.hpp. Rows without a batch
/// (`with_batch` false: a max-batch search) read as batch 1. "attention": "sdpa" (HF's
/// `attn_implementation`, which lets PyTorch pick the kernel) reads as the default, flash.
inline Step step_from(const nlohmann::json& row, const std::string& where, bool with_batch) {
  const auto attention = row.find("attention");
  const bool sdpa = attention != row.end() && *attention == "sdpa";
  if (with_batch && !sdpa) return read_at(where, [&] { return row.get<Step>(); });
  nlohmann::json copy = row;
  if (!with_batch) copy["batch"] = 1;
  if (sdpa) copy.erase("attention");
  return read_at(where, [&] { return copy.get<Step>(); });
}


/// Parses measurement rows (one JSON object a line). Rows with `"error"` set, and rows of kinds
/// other than "step" and "max_batch", are counted in `skipped`. `default_stack` applies to rows
/// that carry no "stack_profile" field. Throws `InvalidInput` naming the line and field.
inline Measurements parse_measurements(std::istream& in, const std::string& source, const std::string& default_stack) {
  Measurements out;
  std::string text;
  std::size_t line = 0;
  while (read_line(in, text, source, line + 1)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = source + ":" + std::to_string(line);
    const nlohmann::json row = detail::parse_row(text, where);
    const std::string kind = detail::optional_string(row, "kind", "", where);
    const bool failed = row.contains("error") && !row["error"].is_null();
    if (failed || (kind != "step" && kind != "max_batch")) {
      ++out.skipped;
      continue;
    }
    const std::string stack = detail::optional_string(row, "stack_profile", default_stack, where);
    const std::string model = detail::optional_string(row, "model", "custom", where);
    if (kind == "step") {
      MeasuredStep m{model, stack, detail::shape_from(row, where), detail::step_from(row, where, true), {}, {}, 0, line, {}, {}, true};
      m.real_first = Bytes(detail::require_count(row, "peak_first", where));
      m.real_steady = Bytes(detail::require_count(row, "peak_steady", where));
      m.realised_seq = detail::require_count(row, "realised_seq", where);
      if (row.contains("pre_arm_allocated") && !row["pre_arm_allocated"].is_null())
        m.baseline = Bytes(detail::require_count(row, "pre_arm_allocated", where));
      if (row.contains("reserved_peak") && !row["reserved_peak"].is_null())
        m.reserved_peak = Bytes(detail::require_count(row, "reserved_peak", where));
      if (const auto f = row.find("cache_emptied_after_build"); f != row.end()) {
        if (!f->is_boolean()) throw InvalidInput(where + ": cache_emptied_after_build", "must be true or false");
        m.cache_emptied_after_build = f->get<bool>();
      }
      if (m.realised_seq != m.step.seq)
        throw InvalidInput(where + ": realised_seq", "differs from seq: the harness did not run the requested length");
      out.steps.push_back(m);
    } else {
      MeasuredMaxBatch m{model, stack, detail::shape_from(row, where), detail::step_from(row, where, false), {}, 0, line};
      m.cap = Bytes(detail::require_count(row, "cap_bytes", where));
      m.max_batch = detail::require_count(row, "max_batch", where);
      out.max_batches.push_back(m);
    }
  }
  return out;
}

/// Opens a JSON-lines file; `InvalidInput` on `field` when it is a directory or cannot be opened, or when it is
/// gzip-compressed (it starts with gzip's magic bytes 1f 8b; vramfit reads no gzip, and parsing
/// would stop at the first byte with "not JSON").
inline std::ifstream open_jsonl(const std::filesystem::path& path, std::string_view field) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InvalidInput(field, "'" + path.string() + "' is a directory; give a JSON-lines file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidInput(field, "cannot open '" + path.string() + "'");
  char magic[2] = {};
  in.read(magic, 2);
  if (in.gcount() == 2 && static_cast<unsigned char>(magic[0]) == 0x1f && static_cast<unsigned char>(magic[1]) == 0x8b)
    throw InvalidInput(field, "'" + path.string() + "' is gzip-compressed: gunzip it first (gunzip -k '" +
                                  path.string() + "') and pass the uncompressed file");
  in.clear();
  in.seekg(0);
  return in;
}

/// Reads a measurements file; see `parse_measurements`. `field` names the file in errors that are
/// not about one line (the CLI's "--data").
inline Measurements load_measurements(const std::filesystem::path& path, const std::string& default_stack,
                                      std::string_view field = "measurements") {
  std::ifstream in = open_jsonl(path, field);
  return parse_measurements(in, path.filename().string(), default_stack);
}


/// A caching-allocator trace (tests/validation/trace_capture.py, or `vramfit probe --trace-out`):
/// every request and free of a real run, in order, with the peaks the allocator reported.
struct AllocatorTrace {
  std::string model;                  ///< the arm's model, as recorded
  Bytes baseline;                     ///< allocated before recording began (outside the events)
  Bytes peak_allocated;               ///< the run's measured peak of allocated bytes, baseline included
  /// The same for requested bytes, where recorded (`vramfit probe --trace-out` does not record it).
  std::optional<Bytes> peak_requested;
  /// n > 0: a request of n bytes; -k: frees the k-th request (1-based, in request order).
  std::vector<std::int64_t> events;
};

/// What replaying a trace through `CachingAllocatorModel` gives, baseline included.
struct TraceReplay {
  Bytes peak_allocated;
  Bytes peak_requested;
  Bytes reserved;                     ///< segments opened during the trace (baseline's not counted)
  std::size_t segments = 0;
};

/// Reads the "trace" row of trace rows (JSON lines); `source` names them in errors ("<source>:<line>:
/// <field>"), and `field` the whole input (the CLI's "--trace"). Throws `InvalidInput`.
inline AllocatorTrace load_trace(std::istream& in, const std::string& source, std::string_view field = "trace") {
  std::string text;
  std::size_t line = 0;
  while (detail::read_line(in, text, source, line + 1)) {
    ++line;
    const std::string where = source + ":" + std::to_string(line);
    const nlohmann::json row = detail::parse_row(text, where);
    if (detail::optional_string(row, "kind", "", where) != "trace") continue;
    AllocatorTrace t;
    if (const auto arm = row.find("arm"); arm != row.end() && arm->is_object())
      t.model = detail::optional_string(*arm, "model", "custom", where + ": arm");
    t.baseline = Bytes(detail::require_count(row, "baseline", where));
    t.peak_allocated = Bytes(detail::require_count(row, "peak_allocated", where));
    if (row.contains("peak_requested")) t.peak_requested = Bytes(detail::require_count(row, "peak_requested", where));
    const auto& events = detail::require(row, "events", where);
    if (!events.is_array()) throw InvalidInput(where + ": events", "must be an array of integers");
    t.events.reserve(events.size());
    std::vector<bool> freed;  // per request: a request is freed at most once
    for (const auto& e : events) {
      if (!e.is_number_integer()) throw InvalidInput(where + ": events", "must be an array of integers");
      const auto v = e.get<std::int64_t>();
      if (v == 0 || (v < 0 && (v < -static_cast<std::int64_t>(freed.size()) || freed[static_cast<std::size_t>(-v - 1)])))
        throw InvalidInput(where + ": events",
                           "a free must name an earlier request not yet freed (got " + std::to_string(v) + ")");
      if (v > 0) freed.push_back(false);
      else freed[static_cast<std::size_t>(-v - 1)] = true;
      t.events.push_back(v);
    }
    return t;
  }
  throw InvalidInput(field, "'" + source + "' has no row of kind \"trace\"");
}

/// Reads the "trace" row of a trace file; throws `InvalidInput` naming the line and field (`field`
/// for the file as a whole).
inline AllocatorTrace load_trace(const std::filesystem::path& path, std::string_view field = "trace") {
  std::ifstream in = open_jsonl(path, field);
  return load_trace(in, path.filename().string(), field);
}

/// Replays a trace's requests and frees through the allocator model, its segments placed by
/// `order` (and `headroom`, for the driver's order; see `CachingAllocatorModel`).
inline TraceReplay replay_trace(const AllocatorTrace& t,
                                CachingAllocatorModel::AddressOrder order = CachingAllocatorModel::AddressOrder::ascending,
                                std::uint64_t headroom = 0) {
  CachingAllocatorModel model(order, headroom);
  std::vector<CachingAllocatorModel::Handle> handles;
  handles.reserve(t.events.size());
  for (const std::int64_t v : t.events) {
    if (v > 0) {
      handles.push_back(model.malloc(static_cast<std::uint64_t>(v)));
    } else {
      model.free(handles.at(static_cast<std::size_t>(-v - 1)));
    }
  }
  return {t.baseline + model.peak_allocated(), t.baseline + model.peak_requested(), model.reserved(), model.segments()};
}

}  // namespace vramfit::detail
