// The fmt formatters, the sweep table and the one-line descriptions.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "vramfit/estimate.hpp"
#include "vramfit/format.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/presets.hpp"

using vramfit::Bytes;
using vramfit::SweepRow;

namespace {
/// The lines of `text`, without their '\n'.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}
}  // namespace

TEST_CASE("Bytes in decimal units, auto-scaled, with the record's precision") {
  CHECK(fmt::format("{}", Bytes(0)) == "0 B");
  CHECK(fmt::format("{}", Bytes(812)) == "812 B");
  CHECK(fmt::format("{}", Bytes(999)) == "999 B");
  CHECK(fmt::format("{}", Bytes(1000)) == "1.0 kB");
  CHECK(fmt::format("{}", Bytes(1500)) == "1.5 kB");
  CHECK(fmt::format("{}", Bytes(999999)) == "1.0 MB");  // 999.999 kB rounds into the next unit
  CHECK(fmt::format("{}", Bytes(512000000)) == "512.0 MB");
  CHECK(fmt::format("{}", Bytes(999949999)) == "999.9 MB");
  CHECK(fmt::format("{}", Bytes(999950000)) == "1.000 GB");  // never "1000.0 MB"
  CHECK(fmt::format("{}", Bytes(1000000000)) == "1.000 GB");
  CHECK(fmt::format("{}", Bytes(1365000000)) == "1.365 GB");
  CHECK(fmt::format("{}", Bytes(13837000000)) == "13.837 GB");
  CHECK(fmt::format("{}", Bytes(999999999999)) == "1.000 TB");
  CHECK(fmt::format("{}", Bytes(std::numeric_limits<std::uint64_t>::max())) == "18.447 EB");
}

TEST_CASE("Bytes in binary units with 'i'") {
  using namespace vramfit::literals;
  CHECK(fmt::format("{:i}", Bytes(812)) == "812 B");
  CHECK(fmt::format("{:i}", Bytes(1023)) == "1023 B");
  CHECK(fmt::format("{:i}", 1_KiB) == "1.00 KiB");
  CHECK(fmt::format("{:i}", 512_MiB) == "512.00 MiB");
  CHECK(fmt::format("{:i}", Bytes(1365000000)) == "1.27 GiB");
  CHECK(fmt::format("{:i}", 24_GiB) == "24.00 GiB");
  CHECK(fmt::format("{:i}", 1_GiB - 1_B) == "1.00 GiB");  // 1023.999 MiB rounds into GiB
  CHECK(fmt::format("{:i}", Bytes(std::numeric_limits<std::uint64_t>::max())) == "16.00 EiB");
}

TEST_CASE("Bytes as the plain number with 'n', and with fill, alignment and width") {
  CHECK(fmt::format("{:n}", Bytes(25769803776)) == "25769803776");
  CHECK(fmt::format("{:n}", Bytes(std::numeric_limits<std::uint64_t>::max())) == "18446744073709551615");
  CHECK(fmt::format("{:>10}", Bytes(812)) == "     812 B");
  CHECK(fmt::format("{:10}", Bytes(812)) == "     812 B");  // right-aligned by default, like numbers
  CHECK(fmt::format("{:<10}", Bytes(812)) == "812 B     ");
  CHECK(fmt::format("{:*^11}", Bytes(812)) == "***812 B***");
  CHECK(fmt::format("{:>12i}", Bytes(1365000000)) == "    1.27 GiB");
  CHECK(fmt::format("{:<8n}|", Bytes(42)) == "42      |");
  CHECK(fmt::format("{:3}", Bytes(1365000000)) == "1.365 GB");  // a width never truncates
}

TEST_CASE("Phase prints its words and takes string specs") {
  CHECK(fmt::format("{}", vramfit::Phase::loss_backward) == "loss backward");
  CHECK(fmt::format("{}", vramfit::Phase::optimizer_step) == "optimizer step");
  CHECK(fmt::format("[{:<16}]", vramfit::Phase::forward) == "[forward         ]");
}

TEST_CASE("Prediction shows the stack, the peak and its phase, the margin and every term") {
  const vramfit::HfPeftPredictor predictor;
  const auto shape = vramfit::preset("SmolLM2-135M");
  const vramfit::Prediction p = predictor.predict(shape, {.batch = 1, .seq = 2048});
  const std::string text = fmt::format("{}", p);

  CHECK(text.find("stack:     hf-peft") != std::string::npos);
  CHECK(text.find(fmt::format("peak:      {} allocated, in the {}", p.peak, p.phase)) != std::string::npos);
  CHECK(text.find(fmt::format("required:  {} with the allocator's margin", p.required)) != std::string::npos);
  for (std::size_t k = 0; k < p.term_count; ++k) {
    CAPTURE(p.terms[k].name);
    CHECK(text.find(std::string("\n") + std::string(p.terms[k].name) + " ") != std::string::npos);
  }
  CHECK(text.find("\ntotal ") != std::string::npos);
  CHECK(text.find("* the phase of the peak") != std::string::npos);

  // The total row holds every phase's total in GB; the peak's heading alone carries the mark.
  const auto lines = lines_of(text);
  std::string total_row;
  for (const auto& line : lines)
    if (line.starts_with("total ")) total_row = line;
  for (vramfit::Phase phase : vramfit::all_phases) {
    CAPTURE(vramfit::to_key(phase));
    CHECK(total_row.find(fmt::format("{:.3f}", p.phases[phase].gigabytes())) != std::string::npos);
  }
  std::size_t marks = 0;
  for (char c : text) marks += c == '*' ? 1 : 0;
  CHECK(marks == 2);  // the heading and the legend
}

TEST_CASE("Prediction's table columns line up") {
  const vramfit::LibTorchPredictor predictor;
  const vramfit::Prediction p =
      predictor.predict(vramfit::preset("Qwen2.5-7B"), {.batch = 2, .seq = 4096, .mode = vramfit::Mode::full});
  const auto lines = lines_of(fmt::format("{}", p));
  // Rows of the table: the two headings, one per term, the total. Every number ends where the
  // others of its column end.
  std::vector<std::string> rows;
  bool in_table = false;
  for (const auto& line : lines) {
    if (line.starts_with("GB")) in_table = true;
    if (line.starts_with("*")) in_table = false;
    if (in_table) rows.push_back(line);
  }
  REQUIRE(rows.size() == 2 + p.term_count + 1);
  const std::string& total = rows.back();
  for (std::size_t r = 2; r < rows.size(); ++r) {
    CAPTURE(rows[r]);
    CHECK(rows[r].size() == total.size());
  }
  const auto& heading = vramfit::detail::phase_headings[static_cast<std::size_t>(p.phase)];
  CHECK(rows[1].find(std::string(heading[1]) + "*") != std::string::npos);
}

TEST_CASE("SweepRow: ratio and verdict") {
  const SweepRow over{.batch = 1, .seq = 2048, .predicted = Bytes(1596000000), .real = Bytes(1365000000)};
  REQUIRE(over.ratio().has_value());
  CHECK(*over.ratio() == doctest::Approx(1.1692).epsilon(1e-4));
  CHECK(over.verdict() == "over-predicts: safe");

  const SweepRow exact{.batch = 1, .seq = 2048, .predicted = Bytes(1000), .real = Bytes(1000)};
  CHECK(*exact.ratio() == 1.0);
  CHECK(exact.verdict() == "exact");

  // One byte under is unsafe, though the ratio rounds to 1.000.
  const SweepRow under{.batch = 1, .seq = 2048, .predicted = Bytes(9999999999), .real = Bytes(10000000000)};
  CHECK(fmt::format("{:.3f}", *under.ratio()) == "1.000");
  CHECK(under.verdict() == "UNDER-PREDICTS: unsafe");

  const SweepRow unmeasured{.batch = 1, .seq = 2048, .predicted = Bytes(1000)};
  CHECK_FALSE(unmeasured.ratio().has_value());
  CHECK(unmeasured.verdict().empty());

  const SweepRow zero_real{.batch = 1, .seq = 2048, .predicted = Bytes(1000), .real = Bytes(0)};
  CHECK_FALSE(zero_real.ratio().has_value());
}

TEST_CASE("sweep_table prints the record's columns, blank where unknown, none that all rows leave blank") {
  const std::vector<SweepRow> rows = {
      {.batch = 1, .seq = 2048, .predicted = Bytes(1596000000), .real = Bytes(1365000000), .realised_seq = 2048},
      {.batch = 1, .seq = 6144, .predicted = Bytes(3000000000), .real = Bytes(3943000000), .realised_seq = 6100},
      {.batch = 4, .seq = 4096, .predicted = Bytes(3094000000)},
  };
  const std::string table = vramfit::sweep_table(rows);
  const auto lines = lines_of(table);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == " seq  batch  predicted      real  pred/real  verdict                 realised");
  CHECK(lines[1] == "2048      1   1.596 GB  1.365 GB     1.169x  over-predicts: safe         2048");
  CHECK(lines[2] == "6144      1   3.000 GB  3.943 GB     0.760x  UNDER-PREDICTS: unsafe      6100");
  CHECK(lines[3] == "4096      4   3.094 GB");
  CHECK(table.find("fits") == std::string::npos);
}

TEST_CASE("sweep_table: an under-prediction never reads as 1.000x") {
  const std::vector<SweepRow> rows = {
      {.batch = 2, .seq = 1536, .predicted = Bytes(11013105152), .real = Bytes(11016250880)},  // 0.99971
      {.batch = 1, .seq = 1536, .predicted = Bytes(11013105152), .real = Bytes(11013105152)},
      {.batch = 1, .seq = 1024, .predicted = Bytes(1000600000), .real = Bytes(1000000000)},    // 1.0006
  };
  const auto lines = lines_of(vramfit::sweep_table(rows));
  REQUIRE(lines.size() == 4);
  CHECK(lines[1].find("0.999x  UNDER-PREDICTS") != std::string::npos);
  CHECK(lines[2].find("1.000x  exact") != std::string::npos);
  CHECK(lines[3].find("1.001x  over-predicts") != std::string::npos);
}

TEST_CASE("sweep_table adds a fits column when a row has one") {
  const std::vector<SweepRow> rows = {
      {.batch = 1, .seq = 1024, .predicted = Bytes(1500000000), .fits = true},
      {.batch = 1, .seq = 8192, .predicted = Bytes(9000000000), .fits = false},
  };
  const auto lines = lines_of(vramfit::sweep_table(rows));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == " seq  batch  predicted  fits");  // no measured columns: no row was measured
  CHECK(lines[1].ends_with("yes"));
  CHECK(lines[2].ends_with("no"));
  CHECK(vramfit::sweep_table({}) == "seq  batch  predicted\n");
}

TEST_CASE("describe: one line on a model and on a step") {
  CHECK(vramfit::describe(vramfit::preset("SmolLM2-135M")) ==
        "vocab 49152, hidden 576, intermediate 1536, 30 layers, 9 heads (3 key/value), head_dim 64, "
        "tied embeddings, 134.5M parameters");
  CHECK(vramfit::describe(vramfit::preset("Qwen2.5-7B")).ends_with("q/k/v bias, 7.62B parameters"));
  CHECK(vramfit::describe(vramfit::preset("Llama-3.1-8B")).find("32 heads (8 key/value)") != std::string::npos);

  CHECK(vramfit::describe(vramfit::Step{}) ==
        "batch 1 x seq 2048 (2048 tokens), bf16, LoRA r=8 on q_proj,v_proj, flash attention, steady-state peak");
  const vramfit::Step full{.batch = 4,
                           .seq = 4096,
                           .precision = vramfit::Precision::fp32,
                           .mode = vramfit::Mode::full,
                           .gradient_checkpointing = true,
                           .attention = vramfit::Attention::math,
                           .logits_retained = true,
                           .peak_over = vramfit::PeakOver::first_step};
  CHECK(vramfit::describe(full) ==
        "batch 4 x seq 4096 (16384 tokens), fp32, full fine-tuning, gradient checkpointing, math attention, "
        "logits retained through backward, first-step peak");
  CHECK(vramfit::describe(full) == "batch 4 x seq 4096 (16384 tokens), " + vramfit::describe_setup(full));
  const vramfit::Step all_linear{.lora = {.rank = 16, .targets = vramfit::TargetSet::all_linear()}};
  CHECK(vramfit::describe_setup(all_linear).find("LoRA r=16 on all-linear") != std::string::npos);
}

TEST_CASE("describe_count: parameter counts in words") {
  CHECK(vramfit::describe_count(812) == "812");
  CHECK(vramfit::describe_count(134515008) == "134.5M");
  CHECK(vramfit::describe_count(999960000) == "1.00B");
  CHECK(vramfit::describe_count(7615616512) == "7.62B");
}

TEST_CASE("an estimate prints its peak, method, required and the closed form's breakdown") {
  const vramfit::Estimate simulated =
      vramfit::estimate(*vramfit::find_preset("SmolLM2-135M"), vramfit::Step{.batch = 1, .seq = 1024});
  const std::string text = fmt::format("{}", simulated);
  CHECK(text.find(fmt::format("peak:      {} allocated, in the {} (allocator simulation)", simulated.peak,
                              simulated.phase)) == 0);
  CHECK(text.find(fmt::format("required:  {}", simulated.required)) != std::string::npos);
  CHECK(text.find(vramfit::breakdown_table(simulated.closed_form)) != std::string::npos);
  // The closed form's own peak and required are not printed as the estimate's (they differ here).
  REQUIRE(simulated.closed_form.peak != simulated.peak);
  CHECK(text.find(fmt::format("peak:      {} allocated", simulated.closed_form.peak)) == std::string::npos);
  CHECK(text.find(fmt::format("required:  {}", simulated.closed_form.required)) == std::string::npos);
  const vramfit::Estimate closed = vramfit::estimate(*vramfit::find_preset("SmolLM2-135M"),
                                                     vramfit::Step{.batch = 1, .seq = 1024, .precision = vramfit::Precision::fp32});
  CHECK(fmt::format("{}", closed).find("method:    closed form; no allocator simulation: recorded in bf16 only") !=
        std::string::npos);
}
