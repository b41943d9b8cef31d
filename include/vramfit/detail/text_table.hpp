#pragma once
/// @file detail/text_table.hpp
/// Text layout for vramfit's tables and formatters: auto-scaled units, fmt-style fill and width,
/// aligned columns.

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "vramfit/bytes.hpp"
#include "vramfit/phase.hpp"

namespace vramfit {

namespace detail {

/// A unit of an auto-scaled quantity: its suffix, its size and the decimals shown in it.
struct ScaleUnit {
  std::string_view suffix;
  std::uint64_t factor;
  int decimals;
};

/// Decimal byte units, with the record's precision: whole bytes, GB to three decimals.
inline constexpr std::array<ScaleUnit, 7> decimal_byte_units = {{{"B", 1, 0},
                                                                  {"kB", 1000ULL, 1},
                                                                  {"MB", 1000000ULL, 1},
                                                                  {"GB", 1000000000ULL, 3},
                                                                  {"TB", 1000000000000ULL, 3},
                                                                  {"PB", 1000000000000000ULL, 3},
                                                                  {"EB", 1000000000000000000ULL, 3}}};
/// Binary byte units (powers of 1024), two decimals.
inline constexpr std::array<ScaleUnit, 7> binary_byte_units = {
    {{"B", 1, 0}, {"KiB", 1ULL << 10, 2}, {"MiB", 1ULL << 20, 2}, {"GiB", 1ULL << 30, 2},
     {"TiB", 1ULL << 40, 2}, {"PiB", 1ULL << 50, 2}, {"EiB", 1ULL << 60, 2}}};
/// Counts of things (parameters): "812", "134.5M", "7.62B".
inline constexpr std::array<ScaleUnit, 5> count_units = {
    {{"", 1, 0}, {"K", 1000ULL, 1}, {"M", 1000000ULL, 1}, {"B", 1000000000ULL, 2}, {"T", 1000000000000ULL, 2}}};

/**
 * `n` in the largest unit it reaches, e.g. "1.365 GB". A value that rounds up to the next unit
 * (999.96 MB) is shown in that unit ("1.000 GB"), never as "1000.0 MB".
 * @param base the step between units (1000 or 1024)
 * @param separator between the number and the suffix
 */
inline std::string scaled(std::uint64_t n, std::span<const ScaleUnit> units, std::uint64_t base,
                          std::string_view separator) {
  std::size_t k = 0;
  while (k + 1 < units.size() && n >= units[k + 1].factor) ++k;
  for (;; ++k) {
    const std::string number =
        fmt::format("{:.{}f}", static_cast<double>(n) / static_cast<double>(units[k].factor), units[k].decimals);
    std::uint64_t whole = 0;
    std::from_chars(number.data(), number.data() + number.size(), whole);  // stops at the point
    if (whole < base || k + 1 == units.size()) return fmt::format("{}{}{}", number, separator, units[k].suffix);
  }
}

/// Fill, alignment and width, as in fmt's standard format specs ("{:>12}", "{:*^20}").
struct TextLayout {
  char fill = ' ';
  char align = '>';
  std::size_t width = 0;

  /// Reads `[[fill]align][width]` from `it`; returns where it stopped.
  constexpr const char* parse(const char* it, const char* end) {
    const auto is_align = [](char c) { return c == '<' || c == '>' || c == '^'; };
    if (end - it >= 2 && is_align(it[1]) && it[0] != '}') {
      fill = it[0];
      align = it[1];
      it += 2;
    } else if (it != end && is_align(*it)) {
      align = *it++;
    }
    while (it != end && *it >= '0' && *it <= '9') {
      width = width * 10 + static_cast<std::size_t>(*it++ - '0');
      if (width > 1000000) throw fmt::format_error("width is too large");
    }
    return it;
  }

  /// Writes `text` padded to the width.
  template <class Out>
  Out write(Out out, std::string_view text) const {
    const std::size_t pad = width > text.size() ? width - text.size() : 0;
    const std::size_t before = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    out = std::fill_n(out, before, fill);
    out = std::copy(text.begin(), text.end(), out);
    return std::fill_n(out, pad - before, fill);
  }
};

/// A table of text cells rendered with aligned columns, two spaces apart, trailing spaces
/// trimmed. Full-width lines (headings, notes) go between rows without widening any column.
class TextTable {
public:
  enum class Align : std::uint8_t { left, right };

  explicit TextTable(std::vector<Align> alignments) : alignments_(std::move(alignments)) {}

  /// Adds a row; missing trailing cells are blank.
  void add_row(std::vector<std::string> cells) { rows_.push_back({std::move(cells), false}); }
  /// Adds a line printed as it is.
  void add_line(std::string line) { rows_.push_back({{std::move(line)}, true}); }

  /// The table, one line per row, each line ending in '\n' and starting with `indent`.
  [[nodiscard]] std::string render(std::string_view indent = "") const {
    std::vector<std::size_t> widths(alignments_.size(), 0);
    for (const auto& row : rows_)
      if (!row.verbatim)
        for (std::size_t c = 0; c < row.cells.size() && c < widths.size(); ++c)
          widths[c] = std::max(widths[c], row.cells[c].size());
    std::string out;
    for (const auto& row : rows_) {
      std::string line(indent);
      if (row.verbatim) {
        line += row.cells.front();
      } else {
        for (std::size_t c = 0; c < widths.size(); ++c) {
          const std::string_view cell = c < row.cells.size() ? std::string_view(row.cells[c]) : std::string_view();
          const std::string padding(widths[c] - cell.size(), ' ');
          if (c > 0) line += "  ";
          line += alignments_[c] == Align::right ? padding + std::string(cell) : std::string(cell) + padding;
        }
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line;
      out += '\n';
    }
    return out;
  }

private:
  struct Row {
    std::vector<std::string> cells;
    bool verbatim;
  };
  std::vector<Align> alignments_;
  std::vector<Row> rows_;
};

/// Column headings of the phases, two lines each, for tables that must stay narrow.
inline constexpr std::array<std::array<std::string_view, 2>, phase_count> phase_headings = {{
    {"", "forward"},
    {"loss", "backward"},
    {"backward of", "last layer"},
    {"backward of", "first layer"},
    {"optimizer", "step"},
}};

/// Decimal gigabytes with three decimals and no unit, the cells of the breakdown table.
inline std::string gigabytes_cell(Bytes b) { return fmt::format("{:.3f}", b.gigabytes()); }

}  // namespace detail

}  // namespace vramfit
