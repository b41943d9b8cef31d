// GPU tests of the probe: the meter, the reference step, the check and its OOM path, and the
// instruments. Every test leaves allocated memory where it found it, and checks that it did.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "vramfit/probe.hpp"

#include "doctest_after_torch.hpp"

using namespace vramfit;
using namespace vramfit::literals;
namespace vp = vramfit::probe;

namespace {

ModelShape tiny_model() {
  return {.vocab = 512, .hidden = 128, .intermediate = 256, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 32};
}

Step tiny_step(Mode mode, bool checkpointing) {
  Step s;
  s.batch = 2;
  s.seq = 64;
  s.mode = mode;
  s.gradient_checkpointing = checkpointing;
  return s;
}

/// A predictor that always says the same.
struct FixedPredictor {
  Bytes value;
  struct Prediction {
    Bytes peak;
  };
  [[nodiscard]] Prediction predict(const ModelShape&, const Step&) const { return {value}; }
};

/// Releases the cuBLAS workspaces and the cache; returns what is still allocated.
Bytes settle(vp::PeakMeter& meter) {
  meter.release_blas_workspaces();
  meter.empty_cache();
  return meter.allocated();
}

/// The reference step measured with `flag` off, then on, each in a model of its own, on a fresh
/// meter; checks that each leaves allocated memory where it found it (both start without cuBLAS
/// workspaces).
struct OffOn {
  vp::StepMeasurement off, on;
};
OffOn measure_off_on(const ModelShape& model, Step step, bool Step::*flag) {
  vp::PeakMeter meter(0);
  const Bytes base = settle(meter);
  OffOn out;
  for (bool value : {false, true}) {
    step.*flag = value;
    {
      vp::ReferenceModel reference(model, step);
      (value ? out.on : out.off) = reference.measure_step(meter);
    }
    CHECK(settle(meter).count() == base.count());
  }
  return out;
}

torch::TensorOptions bytes_on_gpu() { return torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA, 0); }

}  // namespace

TEST_CASE("the meter refuses a device that does not exist") {
  CHECK_THROWS_AS(vp::PeakMeter(4096), InvalidInput);
  CHECK_THROWS_AS(vp::PeakMeter(-1), InvalidInput);
}

TEST_CASE("the meter sees a known allocation and its release") {
  vp::PeakMeter meter(0);
  const Bytes base = settle(meter);
  meter.reset();
  constexpr std::int64_t n = 256LL * 1024 * 1024;
  {
    const torch::Tensor t = torch::empty({n}, bytes_on_gpu());
    meter.synchronize();
    CHECK(meter.allocated().count() >= (base + 256_MiB).count());
    CHECK(meter.peak_allocated().count() >= (base + 256_MiB).count());
    CHECK(meter.reserved().count() >= meter.allocated().count());
  }
  meter.synchronize();
  CHECK(meter.allocated().count() == base.count());
  CHECK(meter.peak_allocated().count() >= (base + 256_MiB).count());  // the peak remembers

  const vp::Measurement m = meter.measure([] { const torch::Tensor t = torch::empty({n}, bytes_on_gpu()); });
  CHECK(m.baseline.count() == base.count());
  CHECK(m.extra().count() >= (256_MiB).count());
  CHECK(m.extra().count() <= (258_MiB).count());  // large blocks round up to 2 MiB at most
  CHECK(m.peak_reserved.count() >= m.peak_allocated.count());
  CHECK(settle(meter).count() == base.count());
}

TEST_CASE("the reference step runs LoRA and full, with and without checkpointing") {
  vp::PeakMeter meter(0);
  const Bytes base = settle(meter);
  const ModelShape model = tiny_model();
  for (Mode mode : {Mode::lora, Mode::full}) {
    for (bool checkpointing : {false, true}) {
      INFO("mode ", std::string(to_string(mode)), ", checkpointing ", checkpointing);
      const Step step = tiny_step(mode, checkpointing);
      {
        vp::ReferenceModel reference(model, step);
        CHECK(reference.realised_seq() == step.seq);
        const vp::StepMeasurement first = reference.measure_step(meter);
        const vp::StepMeasurement second = reference.measure_step(meter);
        CHECK(first.realised_seq == step.seq);
        CHECK(second.realised_seq == step.seq);
        CHECK(first.peak.count() > first.weights.count());
        CHECK(first.peak.count() == std::max({first.forward_peak.count(), first.backward_peak.count(),
                                              first.optimizer_peak.count()}));
        CHECK(second.weights.count() > first.weights.count());  // the AdamW states exist after step 1
        CHECK(first.attention_backend == "flash");
        CHECK(std::isfinite(reference.last_loss()));
        if (mode == Mode::lora) {
          // PEFT's default targets q_proj (128 -> 128) and v_proj (128 -> 64), rank 8, 2 layers.
          CHECK(reference.trainable_parameters() == std::uint64_t{2 * 8 * ((128 + 128) + (128 + 64))});
        } else {
          CHECK(reference.trainable_parameters() == model.parameters());
        }
      }
      CHECK(settle(meter).count() == base.count());
    }
  }
}

TEST_CASE("the reference step forces the attention backend it is asked for") {
  vp::PeakMeter meter(0);
  const Bytes base = settle(meter);
  const std::pair<Attention, const char*> arms[] = {
      {Attention::flash, "flash"}, {Attention::mem_efficient, "mem-efficient"}, {Attention::math, "math"}};
  // Multi-head shape (kv_heads == heads): every backend takes it.
  ModelShape mha = tiny_model();
  mha.kv_heads = mha.heads;
  for (const auto& [attention, name] : arms) {
    Step step = tiny_step(Mode::lora, false);
    step.attention = attention;
    {
      vp::ReferenceModel reference(mha, step);
      reference.run_step();
      CHECK(reference.attention_backend() == name);
    }
    CHECK(settle(meter).count() == base.count());
  }
  // Grouped-query attention: a kernel that refuses it is a clear InvalidInput, never a crash.
  for (const auto& [attention, name] : arms) {
    Step step = tiny_step(Mode::lora, false);
    step.attention = attention;
    CAPTURE(name);
    try {
      vp::ReferenceModel reference(tiny_model(), step);
      reference.run_step();
      CHECK(reference.attention_backend() == name);
    } catch (const InvalidInput& e) {
      CHECK(e.field() == "attention");
    }
    CHECK(settle(meter).count() == base.count());
  }
  Step fp32_flash = tiny_step(Mode::lora, false);
  fp32_flash.precision = Precision::fp32;
  CHECK_THROWS_AS(vp::ReferenceModel(tiny_model(), fp32_flash), InvalidInput);
}

TEST_CASE("every knob of the reference stack runs") {
  vp::PeakMeter meter(0);
  const Bytes base = settle(meter);
  ModelShape model = tiny_model();
  model.qkv_bias = true;
  model.tied_embeddings = true;
  for (bool gated : {true, false}) {
    model.gated_mlp = gated;
    Step step = tiny_step(Mode::lora, true);
    step.lora.targets = gated ? TargetSet::all_linear() : TargetSet::attention();
    step.logits_retained = true;
    vp::ReferenceOptions options;
    options.norm = vp::Norm::fp32_upcast;
    options.adapter_dtype = at::kFloat;
    options.loss_upcast = true;
    {
      vp::ReferenceModel reference(model, step, options);
      CHECK(vp::dtype_name(reference.adapter_dtype()) == "fp32");
      const auto first = reference.measure_step(meter);
      reference.measure_step(meter);
      CHECK(first.realised_seq == step.seq);
      CHECK(std::isfinite(reference.last_loss()));
    }
    CHECK(settle(meter).count() == base.count());
  }
}

TEST_CASE("retained logits add exactly their bytes to the backward peak") {
  // A vocabulary large enough that the loss's backward is the step's peak.
  const ModelShape model{.vocab = 32768, .hidden = 128, .intermediate = 256, .layers = 1, .heads = 4, .kv_heads = 2, .head_dim = 32};
  const Step step{.batch = 2, .seq = 256};
  // Both runs start without cuBLAS workspaces (the forward's thread and the autograd engine's
  // thread each create one), so only the logits differ.
  const auto [dropped, kept] = measure_off_on(model, step, &Step::logits_retained);
  const double logits_bytes = 2.0 * 256 * 32768 * 2;
  const double difference = static_cast<double>(kept.backward_peak.count()) - static_cast<double>(dropped.backward_peak.count());
  CHECK(difference >= 0.95 * logits_bytes);
  CHECK(difference <= 1.05 * logits_bytes);
  CHECK(kept.forward_peak.count() == dropped.forward_peak.count());  // the loss reads them in both
}

TEST_CASE("checkpointing lowers the peak of a step whose activations dominate") {
  const ModelShape model{.vocab = 4096, .hidden = 512, .intermediate = 1408, .layers = 8, .heads = 8, .kv_heads = 4, .head_dim = 64};
  const auto [plain, checkpointed] =
      measure_off_on(model, Step{.batch = 4, .seq = 1024}, &Step::gradient_checkpointing);
  CHECK(checkpointed.peak.count() < plain.peak.count());
}

TEST_CASE("a check compares, decides, writes one JSON line and leaves memory as it found it") {
  vp::Probe probe(0);
  vp::PeakMeter& meter = probe.meter();
  const Bytes base = settle(meter);
  const ModelShape model = tiny_model();
  const Step step = tiny_step(Mode::lora, false);

  const vp::CheckResult over = probe.check(FixedPredictor{1_GiB}, model, step);
  CHECK(over.verdict == vp::verdict_safe);
  CHECK(over.realised_seq == step.seq);
  CHECK(over.real.count() == over.real_steady.count());  // the step asks for the steady state
  CHECK(over.real_steady.count() >= over.real_first.count());
  CHECK(over.real.count() > 0);
  CHECK(over.ratio > 1.0);
  CHECK(!over.oom_requested.has_value());
  CHECK(meter.allocated().count() == base.count());

  const vp::CheckResult under = probe.check(FixedPredictor{Bytes(1)}, model, step);
  CHECK(under.verdict == vp::verdict_unsafe);
  CHECK(under.ratio < 1.0);
  CHECK(meter.allocated().count() == base.count());

  Step first = step;
  first.peak_over = PeakOver::first_step;
  const vp::CheckResult first_only = probe.check(FixedPredictor{1_GiB}, model, first);
  CHECK(first_only.real.count() == first_only.real_first.count());
  CHECK(meter.allocated().count() == base.count());

  const std::string line = vp::to_json_line(over, model, step, probe.options(), probe.stack());
  CHECK(line.find('\n') == std::string::npos);
  const auto row = nlohmann::json::parse(line);
  CHECK(row["verdict"] == std::string(vp::verdict_safe));
  CHECK(row["realised_seq"] == step.seq);
  CHECK(row["step"]["seq"] == step.seq);
  CHECK(row["model"]["hidden"] == model.hidden);
  CHECK(row["options"]["norm"] == "fused");
  CHECK(row["step1"]["attention_backend"] == "flash");
  MESSAGE(line);

  CHECK_THROWS_AS(probe.check(FixedPredictor{1_GiB}, ModelShape{}, step), InvalidInput);
}

TEST_CASE("a step that cannot fit is reported as an OOM, and everything is freed") {
  vp::Probe probe(0);
  vp::PeakMeter& meter = probe.meter();
  const Bytes base = settle(meter);
  // About 1 GB of bf16 weights, then activations of several GB: the weights fit under the cap,
  // the forward does not.
  const ModelShape big{.vocab = 128256, .hidden = 2048, .intermediate = 8192, .layers = 4, .heads = 16,
                       .kv_heads = 8, .head_dim = 128, .tied_embeddings = true};
  Step step;
  step.batch = 1;
  step.seq = 4096;
  step.mode = Mode::full;
  vp::CheckResult r;
  {
    const vp::MemoryFraction cap(0, vp::MemoryFraction::for_bytes(0, meter.reserved() + 1536_MiB));
    r = probe.check(FixedPredictor{Bytes(1)}, big, step);
  }
  CHECK(r.verdict == vp::verdict_oom);
  CHECK(r.out_of_memory());
  REQUIRE(r.oom_requested.has_value());
  CHECK(r.oom_requested->count() > 0);
  CHECK(meter.allocated().count() == base.count());
  {
    // The cap is gone: 4 GiB in one piece can be had again.
    const torch::Tensor t = torch::empty({4LL << 30}, bytes_on_gpu());
    CHECK(meter.allocated().count() >= (base + 4_GiB).count());
  }
  CHECK(settle(meter).count() == base.count());
}

TEST_CASE("cross-entropy costs 6 B per logits element in bf16 and 12 with the fp32 upcast") {
  vp::PeakMeter meter(0);
  const Bytes base = settle(meter);
  const auto rows = vp::measure_loss_bytes(meter, {8192, 32768}, 4096, 2);
  REQUIRE(rows.size() == 4);
  const vp::StackRecord stack = vp::stack_record(0);
  for (const auto& row : rows) {
    INFO("vocab ", row.vocab, ", upcast ", row.upcast, ", mean ", row.mean());
    CHECK(std::abs(row.mean() - (row.upcast ? 12.0 : 6.0)) <= 0.5);
    CHECK(row.total.size() == 2);
    MESSAGE(vp::to_json_line(row, stack));
  }
  CHECK(settle(meter).count() == base.count());
}

TEST_CASE("flash attention's extra memory is linear in sequence, far below math's seq^2") {
  vp::PeakMeter meter(0);
  const Bytes base = settle(meter);
  const auto rows = vp::measure_sdpa_extra(meter, {2048, 4096});
  REQUIRE(rows.size() == 10);
  auto find = [&](std::uint64_t seq, const std::string& backend) -> const vp::SdpaExtra& {
    for (const auto& r : rows)
      if (r.seq == seq && r.backend == backend) return r;
    FAIL("no row for ", backend, " at ", seq);
    return rows.front();
  };
  const vp::StackRecord stack = vp::stack_record(0);
  for (const auto& r : rows) MESSAGE(vp::to_json_line(r, stack));
  const auto& flash2 = find(2048, "flash");
  const auto& flash4 = find(4096, "flash");
  const auto& math4 = find(4096, "math");
  REQUIRE(flash2.total.has_value());
  REQUIRE(flash4.total.has_value());
  REQUIRE(math4.total.has_value());
  CHECK(flash4.chosen == "flash");
  CHECK(math4.chosen == "math");
  CHECK(flash4.total->count() < 3 * flash2.total->count());     // doubling seq: about 2x, not 4x
  CHECK(flash4.total->count() * 10 < math4.total->count());      // far below the math backend
  CHECK(flash4.total->count() < 4096ULL * 4096 * 4);             // below one fp32 seq x seq matrix
  CHECK(!find(4096, "default").chosen.empty());
  CHECK(find(4096, "default").total.has_value());
  CHECK(settle(meter).count() == base.count());
}

TEST_CASE("the stack record names the GPU and the versions") {
  const vp::StackRecord s = vp::stack_record(0);
  CHECK(!s.gpu_name.empty());
  CHECK(s.total_memory.count() > 0);
  CHECK(s.cuda_runtime > 0);
  CHECK(s.cuda_driver_api >= s.cuda_runtime);
  CHECK(s.torch_version.rfind("2.", 0) == 0);
  const std::string line = vp::to_json_line(s);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(nlohmann::json::parse(line)["stack"]["gpu"] == s.gpu_name);
  MESSAGE(line);
}
