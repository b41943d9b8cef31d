#pragma once
/// @file format.hpp
/// fmt formatters for vramfit's results, the record's sweep table, and one-line descriptions of
/// a model and a step.
///
///     fmt::print("{}\n", prediction);          // stack, peak, phase, required, terms x phases
///     fmt::print("{} ({:i})\n", bytes, bytes); // "1.365 GB (1.27 GiB)"
///     fmt::print("{}", vramfit::sweep_table(rows));

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "vramfit/bytes.hpp"
#include "vramfit/detail/text_table.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/sharding.hpp"
#include "vramfit/step.hpp"

namespace vramfit {

namespace detail {
/// fmt's `parse` for a vramfit result printed one way only: any format spec is an error.
struct NoFormatSpec {
  constexpr auto parse(fmt::format_parse_context& ctx) -> decltype(ctx.begin()) {
    auto it = ctx.begin();
    if (it != ctx.end() && *it != '}') throw fmt::format_error("vramfit's results take no format spec");
    return it;
  }
};
}  // namespace detail

/// A parameter count in words: "812", "134.5M", "7.62B".
inline std::string describe_count(std::uint64_t n) {
  return detail::scaled(n, detail::count_units, 1000, "");
}

/// One line on a model shape: "vocab 49152, hidden 576, intermediate 1536, 30 layers, 9 heads
/// (3 key/value), head_dim 64, tied embeddings, 134.5M parameters". Throws `Overflow` for a shape whose
/// parameter count leaves 64 bits (`validate` rejects those).
inline std::string describe(const ModelShape& m) {
  std::string out = fmt::format("vocab {}, hidden {}, intermediate {}{}, {} layers, {} heads", m.vocab, m.hidden,
                                m.intermediate, m.gated_mlp ? "" : " (not gated)", m.layers, m.heads);
  if (m.kv_heads != m.heads) out += fmt::format(" ({} key/value)", m.kv_heads);
  if (m.heads != 0) out += fmt::format(", head_dim {}", m.head_dimension());
  if (m.tied_embeddings) out += ", tied embeddings";
  if (m.qkv_bias) out += ", q/k/v bias";
  if (m.qk_norm) out += ", q/k norms";
  return out + fmt::format(", {} parameters", describe_count(m.parameters()));
}

/// One line on how a step trains, batch and sequence aside: "bf16, LoRA r=8 on q_proj,v_proj,
/// flash attention, steady-state peak"; on several ranks or sharded it ends ", full sharding
/// over 8 ranks, per rank".
inline std::string describe_setup(const Step& s) {
  std::string out(to_string(s.precision));
  if (s.mixed_precision()) out = fmt::format("{} weights under {} autocast", to_string(s.weight_precision()), out);
  out += s.mode == Mode::full ? std::string(", full fine-tuning")
                              : fmt::format(", LoRA r={} on {}", s.lora.rank, to_string(s.lora.targets));
  if (s.lora_dropout()) out += fmt::format(" with dropout {:g}", s.lora.dropout);
  switch (s.optimizer) {
    case Optimizer::adamw: break;
    case Optimizer::adamw_fused: out += ", fused AdamW"; break;
    case Optimizer::adafactor: out += ", Adafactor"; break;
    case Optimizer::sgd_momentum: out += ", SGD with momentum"; break;
    case Optimizer::sgd: out += ", SGD"; break;
  }
  if (s.grad_accum > 1) out += fmt::format(", {} micro-batches per step", s.grad_accum);
  if (s.gradient_checkpointing) out += ", gradient checkpointing";
  out += fmt::format(", {} attention", to_string(s.attention));
  if (s.logits_retained) out += ", logits retained through backward";
  out += s.peak_over == PeakOver::steady ? ", steady-state peak" : ", first-step peak";
  if (!s.single_gpu()) out += ", " + describe_sharding(s) + ", per rank";
  return out;
}

/// One line on a step: "batch 4 x seq 2048 (8192 tokens), bf16, LoRA r=8 on q_proj,v_proj,
/// flash attention, steady-state peak".
inline std::string describe(const Step& s) {
  std::string out = fmt::format("batch {} x seq {}", s.batch, s.seq);
  if (s.batch != 0 && s.seq <= std::numeric_limits<std::uint64_t>::max() / s.batch)
    out += fmt::format(" ({} tokens)", s.batch * s.seq);
  return out + ", " + describe_setup(s);
}

/// One row of a sweep: a step's prediction and, when the step was run, what it really took.
struct SweepRow {
  std::uint64_t batch = 0;                       ///< sequences per step
  std::uint64_t seq = 0;                         ///< the sequence length asked for
  Bytes predicted{};                             ///< the predicted peak of allocated bytes
  std::optional<Bytes> real{};                   ///< the measured peak, when the step was run
  std::optional<std::uint64_t> realised_seq{};   ///< the sequence length the run really had
  std::optional<bool> fits{};                    ///< whether the step fits the budget, when one was given

  /// predicted / real; empty without a real peak (or with a real peak of 0).
  [[nodiscard]] std::optional<double> ratio() const {
    if (!real || real->count() == 0) return std::nullopt;
    return static_cast<double>(predicted.count()) / static_cast<double>(real->count());
  }
  /// The record's verdict, compared in bytes (not through the rounded ratio): "exact" when
  /// predicted == real, "over-predicts: safe" when above, "UNDER-PREDICTS: unsafe" when below, ""
  /// without a real peak.
  [[nodiscard]] std::string_view verdict() const {
    if (!real) return "";
    if (predicted == *real) return "exact";
    return predicted > *real ? "over-predicts: safe" : "UNDER-PREDICTS: unsafe";
  }
};

namespace detail {
/// pred/real to 3 decimals and "x"; a ratio under 1 rounds down, so an under-prediction never
/// reads as 1.000x (0.9997 prints 0.999x).
inline std::string ratio_cell(double ratio) {
  return fmt::format("{:.3f}x", ratio < 1.0 ? std::floor(ratio * 1000.0) / 1000.0 : ratio);
}
}  // namespace detail

/**
 * The record's sweep table, one row per step: seq, batch, predicted; where any row was measured,
 * real, pred/real (3 decimals and "x", rounded down under 1 so an under-prediction never reads
 * 1.000x) and verdict; where any row has one, the realised sequence length and "fits". Blank
 * cells where a row lacks a value; no column that every row would leave blank.
 *
 *      seq  batch  predicted      real  pred/real  verdict              realised
 *     2048      1   1.596 GB  1.365 GB     1.169x  over-predicts: safe      2048
 */
inline std::string sweep_table(std::span<const SweepRow> rows) {
  using Align = detail::TextTable::Align;
  const auto any = [&](auto has) { return std::any_of(rows.begin(), rows.end(), has); };
  const bool with_real = any([](const SweepRow& r) { return r.real.has_value(); });
  const bool with_realised = any([](const SweepRow& r) { return r.realised_seq.has_value(); });
  const bool with_fits = any([](const SweepRow& r) { return r.fits.has_value(); });
  std::vector<Align> columns = {Align::right, Align::right, Align::right};
  std::vector<std::string> heading = {"seq", "batch", "predicted"};
  const auto column = [&](Align a, std::string title) {
    columns.push_back(a);
    heading.push_back(std::move(title));
  };
  if (with_real) {
    column(Align::right, "real");
    column(Align::right, "pred/real");
    column(Align::left, "verdict");
  }
  if (with_realised) column(Align::right, "realised");
  if (with_fits) column(Align::left, "fits");
  detail::TextTable table(std::move(columns));
  table.add_row(std::move(heading));
  for (const SweepRow& r : rows) {
    std::vector<std::string> cells = {fmt::format("{}", r.seq), fmt::format("{}", r.batch),
                                      detail::scaled(r.predicted.count(), detail::decimal_byte_units, 1000, " ")};
    if (with_real) {
      const auto ratio = r.ratio();
      cells.push_back(r.real ? detail::scaled(r.real->count(), detail::decimal_byte_units, 1000, " ") : std::string());
      cells.push_back(ratio ? detail::ratio_cell(*ratio) : std::string());
      cells.emplace_back(r.verdict());
    }
    if (with_realised) cells.push_back(r.realised_seq ? fmt::format("{}", *r.realised_seq) : std::string());
    if (with_fits) cells.emplace_back(r.fits ? (*r.fits ? "yes" : "no") : "");
    table.add_row(std::move(cells));
  }
  return table.render();
}

}  // namespace vramfit

/**
 * `vramfit::Bytes`: decimal units by default ("1.365 GB", "512.0 MB", "812 B"); `i` for binary
 * units ("1.27 GiB"); `n` for the plain integer. Fill, alignment and width as for strings, right
 * aligned by default: "{:>12}", "{:<10i}", "{:20n}".
 */
template <>
struct fmt::formatter<vramfit::Bytes> {
  vramfit::detail::TextLayout layout;
  char presentation = 'd';  ///< d: decimal units, i: binary units, n: the number of bytes

  constexpr auto parse(format_parse_context& ctx) -> decltype(ctx.begin()) {
    auto it = layout.parse(ctx.begin(), ctx.end());
    if (it != ctx.end() && (*it == 'i' || *it == 'n')) presentation = *it++;
    if (it != ctx.end() && *it != '}')
      throw format_error("invalid format for vramfit::Bytes: expected [[fill]align][width][i|n]");
    return it;
  }

  auto format(vramfit::Bytes b, format_context& ctx) const -> decltype(ctx.out()) {
    namespace vd = vramfit::detail;
    const std::string text = presentation == 'n'   ? fmt::format("{}", b.count())
                             : presentation == 'i' ? vd::scaled(b.count(), vd::binary_byte_units, 1024, " ")
                                                   : vd::scaled(b.count(), vd::decimal_byte_units, 1000, " ");
    return layout.write(ctx.out(), text);
  }
};

/// `vramfit::Phase` as words ("loss backward"); string format specs apply ("{:<24}").
template <>
struct fmt::formatter<vramfit::Phase> : fmt::formatter<std::string_view> {
  auto format(vramfit::Phase p, format_context& ctx) const -> decltype(ctx.out()) {
    return fmt::formatter<std::string_view>::format(vramfit::to_string(p), ctx);
  }
};

namespace vramfit {
/**
 * Each term's bytes at every phase in GB (10^9 bytes), the peak's column marked with `*`: the
 * breakdown that `fmt::print("{}", prediction)` ends with, and that an estimate prints under its
 * own peak (the simulation's, where one ran):
 *
 *     GB                         loss   backward of   backward of   optimizer
 *                  forward   backward*   last layer   first layer        step
 *     parameters     0.275      0.275         0.275         0.276       0.278
 *     ...
 *     total          2.648      2.849         1.660         0.378       0.312
 *     * the phase of the peak
 */
inline std::string breakdown_table(const Prediction& p) {
  using Align = detail::TextTable::Align;
  std::vector<Align> columns(1 + phase_count, Align::right);
  columns[0] = Align::left;
  detail::TextTable table(std::move(columns));
  std::vector<std::string> first = {"GB"}, second = {""};
  for (Phase phase : all_phases) {
    const auto& heading = detail::phase_headings[static_cast<std::size_t>(phase)];
    first.push_back(std::string(heading[0]) + " ");
    second.push_back(std::string(heading[1]) + (phase == p.phase ? "*" : " "));
  }
  table.add_row(std::move(first));
  table.add_row(std::move(second));
  const auto add = [&](std::string_view name, const PhaseBytes& bytes) {
    std::vector<std::string> cells = {std::string(name)};
    for (Phase phase : all_phases) cells.push_back(detail::gigabytes_cell(bytes[phase]) + " ");
    table.add_row(std::move(cells));
  };
  for (std::size_t k = 0; k < p.term_count && k < p.terms.size(); ++k) add(p.terms[k].name, p.terms[k].bytes);
  add("total", p.phases);
  table.add_line("* the phase of the peak");
  return table.render();
}
}  // namespace vramfit

/**
 * `vramfit::Prediction`: the stack, the peak and its phase, what a budget must cover, then the
 * breakdown (`breakdown_table`):
 *
 *     stack:     hf-peft
 *     peak:      2.849 GB allocated, in the loss backward
 *     required:  3.030 GB with the allocator's margin
 *
 *     GB                         loss   backward of   backward of   optimizer
 *     ...
 */
template <>
struct fmt::formatter<vramfit::Prediction> : vramfit::detail::NoFormatSpec {

  auto format(const vramfit::Prediction& p, format_context& ctx) const -> decltype(ctx.out()) {
    auto out = fmt::format_to(ctx.out(), "stack:     {}\npeak:      {} allocated, in the {}\n",
                              p.stack.empty() ? std::string_view("(unnamed)") : p.stack, p.peak, p.phase);
    out = fmt::format_to(out, "required:  {} with the allocator's margin\n\n", p.required);
    const std::string text = vramfit::breakdown_table(p);
    return std::copy(text.begin(), text.end(), out);
  }
};
