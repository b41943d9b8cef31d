// The card table (vramfit/gpus.hpp): names, budgets, and the measured H200 row against its data.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "vramfit/gpus.hpp"

using vramfit::gpu;

TEST_CASE("cards are found by name, case, spaces and dashes alike; an unknown one names the field") {
  CHECK(gpu("rtx 4090").name == "RTX-4090");
  CHECK(gpu("a100_80gb").total_bytes == 81038ULL << 20);
  CHECK(gpu("H200").measured);
  try {
    (void)gpu("RTX 5090", "--gpu");
    FAIL("an unknown card was accepted");
  } catch (const vramfit::InvalidInput& e) {
    CHECK(e.field() == "--gpu");
    CHECK(std::string(e.what()).find("known: RTX-3050-Laptop-4GB") != std::string::npos);
  }
}

TEST_CASE("every card leaves a positive budget below its total; only the H200 is measured") {
  for (const vramfit::Gpu& g : vramfit::gpus) {
    CAPTURE(g.name);
    CHECK(g.allocator_budget().count() > 0);
    CHECK(g.allocator_budget().count() < g.total_bytes);
    CHECK(g.measured == (g.name == "H200"));
  }
}

TEST_CASE("the H200 row is what tests/data/cuda_context_h200.jsonl measured") {
  std::ifstream in(VRAMFIT_TEST_DATA_DIR "/cuda_context_h200.jsonl");
  REQUIRE(in);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    CHECK(j.at("total_memory").get<std::uint64_t>() == gpu("H200").total_bytes);
    // The largest share the driver held in the process, after the training kernels had loaded.
    std::uint64_t held = 0;
    for (const auto& p : j.at("points")) held = std::max(held, p.at("driver_held").get<std::uint64_t>());
    CHECK(held == vramfit::driver_held_h200);
    ++rows;
  }
  CHECK(rows == 6);  // three fresh processes each, default and expandable segments
}
