// Sharding: per-rank bytes of the parameter term under DDP, ZeRO-1/2, FSDP2 full and hybrid
// sharding, priced by hand for a small made-up shape from the formulas in the comments of
// sharding.hpp; world size 1 against the single-GPU prediction; monotonicity in world size;
// max_batch at the boundary; bad input named by its field. There is no multi-GPU measurement to
// replay yet: nothing here says how close these figures are to a real run.
//
// The shape is terms_test.cpp's: V 1000, h 64, i 160, 3 layers, 4 query heads of 16 (q width
// 64), 2 kv heads (kv width 32), gated MLP, untied, no biases. Its tensors, rows x row length:
//   root:  embedding 1000 x 64, lm_head 1000 x 64, final norm 64 x 1
//   layer: q 64 x 64, k 32 x 64, v 32 x 64, o 64 x 64, gate 160 x 64, up 160 x 64,
//          down 64 x 160, two norms 64 x 1; LoRA r=4 on q: A 4 x 64, B 64 x 4; on v: A 4 x 64, B 32 x 4
#include <doctest/doctest.h>

#include "support.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "vramfit/error.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/sharding.hpp"
#include "vramfit/step.hpp"
#include "vramfit/terms.hpp"

using namespace vramfit;
using vramfit::test::check_phases;
using vramfit::test::field_of;
using vramfit::test::small;
using vramfit::test::lora_qv;

namespace {

constexpr Step full_step{.batch = 2, .seq = 8, .mode = Mode::full};

using HfPeft = profiles::HfPeft;
using LibTorch = profiles::LibTorch;

constexpr std::uint64_t layer_params = 4096 + 2048 + 2048 + 4096 + 3 * 10240 + 2 * 64;  // 43136
constexpr std::uint64_t embedding_params = 1000 * 64;                                    // 64000
constexpr std::uint64_t root_params = 2 * embedding_params + 64;                         // 128064
constexpr std::uint64_t all_params = 3 * layer_params + root_params;                     // 257472
constexpr std::uint64_t layer_adapter_params = 4 * (64 + 64) + 4 * (64 + 32);            // 896
constexpr std::uint64_t bucket_elements = 500000000;  // DeepSpeed's reduce_bucket_size default

constexpr Step with(Step s, std::uint64_t world_size, Sharding sharding, std::uint64_t shard_group = 0) {
  s.world_size = world_size;
  s.sharding = sharding;
  s.shard_group = shard_group;
  return s;
}



}  // namespace

TEST_CASE("DDP: a second copy of the trainable grads (the reducer's buckets) through every phase") {
  // LoRA under hf-peft: fp32 adapters; the buckets hold fp32 grads of the adapters only.
  const std::uint64_t weights = 2 * all_params, adapters = 4 * 3 * layer_adapter_params;  // 514944, 10752
  const std::uint64_t moments = 2 * adapters, buckets = adapters;
  const std::uint64_t persistent = weights + adapters + moments + buckets;
  check_phases(ParameterTerm<HfPeft>{}(small, with(lora_qv, 4, Sharding::none)), persistent, persistent,
               persistent + adapters / 3, persistent + adapters, weights + adapters + adapters + moments + adapters + buckets);
  // Full fine-tuning: bf16 grads of every parameter.
  const std::uint64_t w = 2 * all_params;
  const std::uint64_t top_grads = 2 * (embedding_params + 64) + 2 * layer_params;
  check_phases(ParameterTerm<HfPeft>{}(small, with(full_step, 8, Sharding::none)), 4 * w, 4 * w, 4 * w + top_grads,
               5 * w, 6 * w);
  // It is the single-GPU figure plus the buckets, whatever the world size.
  for (std::uint64_t n : {2, 3, 64, 65536}) {
    CAPTURE(n);
    const PhaseBytes one = ParameterTerm<LibTorch>{}(small, full_step);
    const PhaseBytes ddp = ParameterTerm<LibTorch>{}(small, with(full_step, n, Sharding::none));
    for (Phase p : all_phases) CHECK(ddp[p] == one[p] + Bytes(w));
  }
}

TEST_CASE("ZeRO-1 and ZeRO-2: moments, temporaries (and for ZeRO-2 grads) in flat partitions, plus the reduce bucket") {
  // Full fine-tuning in bf16 over 4 ranks: the partition is 2 ceil(257472 / 8) = 64368 elements.
  const std::uint64_t partition = 2 * 32184;
  REQUIRE(partition * 4 == all_params);  // no padding here
  const std::uint64_t w = 2 * all_params, grads = 2 * partition, moments = 2 * grads;
  const std::uint64_t bucket = 2 * bucket_elements;   // 1 GB of bf16
  const std::uint64_t copy_in = 2 * embedding_params;  // the largest grad, before it is copied into the bucket
  const std::uint64_t top_grads = 2 * (embedding_params + 64) + 2 * layer_params;

  SUBCASE("zero2, hf-peft (foreach temporaries: one partition)") {
    const std::uint64_t persistent = w + moments;
    check_phases(ParameterTerm<HfPeft>{}(small, with(full_step, 4, Sharding::zero2)), persistent, persistent + bucket,
                 persistent + top_grads + bucket, persistent + grads + bucket + copy_in, w + grads + moments + grads);
  }
  SUBCASE("zero1 keeps every grad through the backward; the step frees all but its partition") {
    const std::uint64_t persistent = w + moments;
    check_phases(ParameterTerm<HfPeft>{}(small, with(full_step, 4, Sharding::zero1)), persistent, persistent + bucket,
                 persistent + top_grads + bucket, persistent + w + bucket + copy_in, w + grads + moments + grads);
  }
  SUBCASE("libtorch (per-tensor temporaries: twice the largest tensor, at most the partition)") {
    const PhaseBytes got = ParameterTerm<LibTorch>{}(small, with(full_step, 4, Sharding::zero2));
    CHECK(got[Phase::optimizer_step].count() == w + grads + moments + 2 * 2 * embedding_params);
    // Over 8 ranks the partition (2 ceil(257472 / 16) = 32184 elements) is smaller than the embedding.
    const PhaseBytes eight = ParameterTerm<LibTorch>{}(small, with(full_step, 8, Sharding::zero2));
    CHECK(eight[Phase::optimizer_step].count() == w + 2 * 32184 + 4 * 32184 + 2 * 2 * 32184);
  }
  SUBCASE("the partition is padded to 2 x the world size (DeepSpeed's alignment)") {
    // 257472 / 10 = 25747.2: 2 ceil(257472 / 10) = 51496 elements over 5 ranks, not 51494.4.
    const std::uint64_t p5 = 51496;
    const PhaseBytes got = ParameterTerm<HfPeft>{}(small, with(full_step, 5, Sharding::zero2));
    CHECK(got[Phase::optimizer_step].count() == w + 2 * p5 + 4 * p5 + 2 * p5);
  }
  SUBCASE("first step: no moments before the optimizer step") {
    Step first = with(full_step, 4, Sharding::zero2);
    first.peak_over = PeakOver::first_step;
    const PhaseBytes got = ParameterTerm<HfPeft>{}(small, first);
    CHECK(got[Phase::forward].count() == w);
    CHECK(got[Phase::optimizer_step].count() == w + grads + moments + grads);
  }
  SUBCASE("LoRA: the bucket and the partitions are in the adapters' dtype (fp32 under hf-peft)") {
    const std::uint64_t n = 3 * layer_adapter_params;  // 2688 = 8 x 336: no padding over 4 ranks
    const std::uint64_t adapters = 4 * n, part = 4 * (n / 4), lora_moments = 2 * part;
    const std::uint64_t persistent = w + adapters + lora_moments;
    const std::uint64_t largest = 4 * 4 * 64;  // q's lora_A and lora_B: 256 elements each
    check_phases(ParameterTerm<HfPeft>{}(small, with(lora_qv, 4, Sharding::zero2)), persistent,
                 persistent + 4 * bucket_elements, persistent + adapters / 3 + 4 * bucket_elements,
                 persistent + part + 4 * bucket_elements + largest, w + adapters + part + lora_moments + part);
  }
}

TEST_CASE("FSDP2 full sharding, full fine-tuning over 4 ranks (no padding)") {
  // Rank 0's shards: a quarter of every tensor (every dim 0 divides by 4).
  const std::uint64_t root_shard = 2 * root_params / 4, layer_shard = 2 * layer_params / 4;  // 64032, 21568
  const std::uint64_t root = 2 * root_params, layer = 2 * layer_params;  // unsharded: 256128, 86272
  const std::uint64_t grads = root_shard + 3 * layer_shard, moments = 2 * grads;
  const std::uint64_t persistent = root_shard + 3 * layer_shard + moments;
  const std::uint64_t head_grads = 2 * (embedding_params + 64);  // lm_head and final norm, unsharded
  // Forward: root unsharded + the last layer's all-gather output held + a layer's copy-out.
  const std::uint64_t forward = persistent + root + layer + layer;
  // Loss backward: root + the last layer prefetched.
  const std::uint64_t loss_backward = persistent + root + layer;
  // Last layer: unsharded, the next prefetched, its grads, the layer above's reduce-scatter
  // input and sharded grads (charged for the layer just below the top).
  const std::uint64_t top = persistent + root + layer + head_grads + (layer + layer + (layer + layer_shard));
  // Layer 0: root, layer 0, layer 1's reduce-scatter input, head grads, 2 layers' sharded grads,
  // its own grads (as large as its all-gather output here).
  const std::uint64_t layer_zero = root + layer + layer + head_grads + 2 * layer_shard + layer;
  const std::uint64_t embedding = root + root + 3 * layer_shard + layer;  // every root grad unsharded
  const std::uint64_t root_reduce = root + root + 3 * layer_shard;
  const std::uint64_t early_forward = root + root + layer;  // layer 0 gathers, the root's output held
  REQUIRE(layer_zero > std::max({embedding, root_reduce, early_forward}));  // 686208 > 663232
  const std::uint64_t optimizer = root_shard + 3 * layer_shard + grads + moments + grads;
  CHECK(optimizer == 10 * all_params / 4);  // 10 B per parameter, over 4
  check_phases(ParameterTerm<HfPeft>{}(small, with(full_step, 4, Sharding::full)), forward, loss_backward, top,
               persistent + layer_zero, optimizer);
  // Tied embeddings: one root matrix, and the embedding's grad arrives as a second tensor.
  ModelShape tied = small;
  tied.tied_embeddings = true;
  const std::uint64_t tied_root = 2 * (embedding_params + 64);
  const PhaseBytes got = ParameterTerm<HfPeft>{}(tied, with(full_step, 4, Sharding::full));
  const std::uint64_t tied_grads = tied_root / 4 + 3 * layer_shard;
  const std::uint64_t tied_persistent = tied_root / 4 + 3 * layer_shard + 2 * tied_grads;
  CHECK(got[Phase::loss_backward].count() == tied_persistent + tied_root + layer);
  const std::uint64_t tied_embedding = tied_root + tied_root + 2 * embedding_params + 3 * layer_shard + layer;
  const std::uint64_t tied_layer_zero = tied_root + layer + layer + tied_root + 2 * layer_shard + layer;
  CHECK(got[Phase::backward_bottom].count() == tied_persistent + std::max(tied_embedding, tied_layer_zero));
}

TEST_CASE("FSDP2 full sharding, LoRA over 4 ranks: frozen weights sharded too, only adapters reduce-scattered") {
  const std::uint64_t root_shard = 2 * root_params / 4, root = 2 * root_params;
  // A layer: bf16 base weights plus fp32 adapters, whose shards are q A 1 x 64, q B 16 x 4, v A 1 x 64, v B 8 x 4.
  const std::uint64_t adapter_shard = 4 * (64 + 64 + 64 + 32);  // 896
  const std::uint64_t layer_shard = 2 * layer_params / 4 + adapter_shard;
  const std::uint64_t layer = 2 * layer_params + 4 * layer_adapter_params;  // 89856
  const std::uint64_t layer_grads = 4 * layer_adapter_params;               // 3584
  const std::uint64_t grads = 3 * adapter_shard, moments = 2 * grads;
  const std::uint64_t persistent = root_shard + 3 * layer_shard + moments;
  const std::uint64_t top = persistent + root + layer + (layer + layer_grads + (layer_grads + adapter_shard));
  // Layer 0: the all-gather output is larger than its grads.
  const std::uint64_t layer_zero = root + layer + layer_grads + 2 * adapter_shard + layer;
  const std::uint64_t early_forward = root + root + layer;
  REQUIRE(early_forward > layer_zero);  // a large root: the forward's first moment is the larger
  check_phases(ParameterTerm<HfPeft>{}(small, with(lora_qv, 4, Sharding::full)), persistent + root + 2 * layer,
               persistent + root + layer, top, persistent + early_forward,
               root_shard + 3 * layer_shard + grads + moments + grads);
}

TEST_CASE("FSDP2 pads each tensor's dim 0 to a multiple of the shard count: hybrid:3 over 6 ranks") {
  // Rows per rank: ceil(1000 / 3) = 334, ceil(64 / 3) = 22, ceil(32 / 3) = 11, ceil(160 / 3) = 54, ceil(4 / 3) = 2.
  const std::uint64_t root_shard = 2 * (334 * 64 + 334 * 64 + 22);                               // 85548
  const std::uint64_t base_shard = 2 * (22 * 64 + 11 * 64 + 11 * 64 + 22 * 64 + 54 * 64 * 2 + 22 * 160 + 22 + 22);  // 29400
  const std::uint64_t adapter_shard = 4 * (2 * 64 + 22 * 4 + 2 * 64 + 11 * 4);                  // 1552
  const std::uint64_t grads = 3 * adapter_shard, moments = 2 * grads;
  const Step hybrid = with(lora_qv, 6, Sharding::hybrid, 3);
  const PhaseBytes got = ParameterTerm<HfPeft>{}(small, hybrid);
  CHECK(got[Phase::optimizer_step].count() == root_shard + 3 * (base_shard + adapter_shard) + grads + moments + grads);
  // Unsharded storage is the padded all-gather output: 3 x the shard.
  const std::uint64_t root = 3 * root_shard, layer = 3 * (base_shard + adapter_shard);
  CHECK(got[Phase::loss_backward].count() == root_shard + 3 * (base_shard + adapter_shard) + moments + root + layer);
  // hybrid:K shards over K ranks, whatever the world size: the same as full sharding over K.
  const PhaseBytes full3 = ParameterTerm<HfPeft>{}(small, with(lora_qv, 3, Sharding::full));
  const PhaseBytes hybrid_wide = ParameterTerm<HfPeft>{}(small, with(lora_qv, 3 * 512, Sharding::hybrid, 3));
  for (Phase p : all_phases) {
    CHECK(got[p] == full3[p]);
    CHECK(hybrid_wide[p] == full3[p]);
  }
  // hybrid over one group is full sharding.
  const PhaseBytes full8 = ParameterTerm<LibTorch>{}(small, with(full_step, 8, Sharding::full));
  const PhaseBytes hybrid8 = ParameterTerm<LibTorch>{}(small, with(full_step, 8, Sharding::hybrid, 8));
  for (Phase p : all_phases) CHECK(full8[p] == hybrid8[p]);
}

TEST_CASE("world size 1: the single-GPU prediction, plus only the documented buffers") {
  const HfPeftPredictor hf;
  const LibTorchPredictor lt;
  const std::vector<Step> steps = {
      Step{}, Step{.mode = Mode::full}, Step{.mode = Mode::full, .peak_over = PeakOver::first_step},
      Step{.lora = {.rank = 16, .targets = TargetSet::all_linear()}, .gradient_checkpointing = true},
      Step{.precision = Precision::fp32, .mode = Mode::full}, Step{.batch = 4, .seq = 512, .logits_retained = true}};
  for (const auto& preset : presets) {
    for (std::size_t k = 0; k < steps.size(); ++k) {
      CAPTURE(preset.name);
      CAPTURE(k);
      const ModelShape& m = preset.shape;
      const Step& single = steps[k];
      const bool full = single.mode == Mode::full;
      const std::uint64_t e = element_bytes(single.precision);

      // none on one rank is not DDP: exactly the single-GPU prediction, every term and phase.
      const Prediction one = hf.predict(m, single), none = hf.predict(m, with(single, 1, Sharding::none));
      for (Phase p : all_phases) CHECK(none.phases[p] == one.phases[p]);
      // And the sharded path computes the same state as ParameterTerm's own (LibTorch: other dtypes).
      const PhaseBytes direct =
          detail::sharded_parameter_bytes(m, single, {e, e, AdamWTemporaries::per_tensor});
      const PhaseBytes term = ParameterTerm<LibTorch>{}(m, single);
      for (Phase p : all_phases) CHECK(direct[p] == term[p]);

      // zero1 and zero2: the reduce bucket from the loss's backward to the end of the backward,
      // and one grad as autograd made it before its copy into the bucket.
      for (Sharding z : {Sharding::zero1, Sharding::zero2}) {
        const std::uint64_t g = full ? e : 4;  // hf-peft adapters are fp32
        const Bytes bucket = bytes_of(g, {bucket_elements});
        std::uint64_t largest = full ? m.largest_tensor() : 0;
        if (!full)
          for (Module mod : all_modules)
            if (m.has(mod) && single.adapted(mod)) {
              const auto d = m.dims(mod);
              largest = std::max(largest, single.lora.rank * std::max(d.in, d.out));
            }
        const Prediction zero = hf.predict(m, with(single, 1, z));
        const PhaseBytes a = zero.terms[0].bytes, b = one.terms[0].bytes;
        CHECK(a[Phase::forward] == b[Phase::forward]);
        CHECK(a[Phase::loss_backward] == b[Phase::loss_backward] + bucket);
        CHECK(a[Phase::backward_top] == b[Phase::backward_top] + bucket);
        CHECK(a[Phase::backward_bottom] == b[Phase::backward_bottom] + bucket + bytes_of(g, {largest}));
        CHECK(a[Phase::optimizer_step] == b[Phase::optimizer_step]);
        for (std::size_t t = 1; t < one.term_count; ++t)
          for (Phase p : all_phases) CHECK(zero.terms[t].bytes[p] == one.terms[t].bytes[p]);
      }

      // full (FSDP2 on one rank): no all-gather, but separate unsharded copies of the root and
      // of the layer at work, and the reduce-scatter inputs; the optimizer step is exact.
      const Prediction fsdp = lt.predict(m, with(single, 1, Sharding::full));
      const Prediction lone = lt.predict(m, single);
      const PhaseBytes a = fsdp.terms[0].bytes, b = lone.terms[0].bytes;
      const std::uint64_t adapters_per_layer = ParameterTerm<LibTorch>::adapter_parameters(m, single) / m.layers;
      const Bytes root = bytes_of(e, {m.parameters() - m.layer_parameters() * m.layers});
      const Bytes layer = bytes_of(e, {m.layer_parameters() + adapters_per_layer});
      const Bytes layer_grads = bytes_of(e, {full ? m.layer_parameters() : adapters_per_layer});
      CHECK(a[Phase::forward] == b[Phase::forward] + root + layer);
      CHECK(a[Phase::loss_backward] == b[Phase::loss_backward] + root);
      // The layer below the top holds the reduce-scatter input of the one above and its shard.
      CHECK(a[Phase::backward_top] == b[Phase::backward_top] + root + layer + layer_grads * 2);
      CHECK(a[Phase::backward_bottom] >= b[Phase::backward_bottom]);
      CHECK(a[Phase::backward_bottom] <= b[Phase::backward_bottom] + root * 2 + layer * 2 + layer_grads * 2);
      CHECK(a[Phase::optimizer_step] == b[Phase::optimizer_step]);
      // hybrid:1 is FSDP2 replicating on every rank: the same bytes whatever the world size.
      const Prediction hybrid = lt.predict(m, with(single, 16, Sharding::hybrid, 1));
      for (Phase p : all_phases) CHECK(hybrid.phases[p] == fsdp.phases[p]);
    }
  }
}

namespace {
/// The largest power of two dividing every tensor's dim 0 (rows), up to 2^16: FSDP2 pads no
/// tensor when the shard count divides it.
std::uint64_t unpadded_shard_limit(const ModelShape& m, const Step& s) {
  std::uint64_t limit = 1ULL << 16;
  const auto divide = [&](std::uint64_t rows) {
    while (rows % limit != 0) limit /= 2;
  };
  for (std::uint64_t rows : {m.vocab, m.hidden, m.intermediate, m.q_width(), m.kv_width()}) divide(rows);
  if (s.mode == Mode::lora) divide(s.lora.rank);
  return limit;
}
}  // namespace

TEST_CASE("per-rank bytes do not grow with the world size for zero1, zero2 and full sharding") {
  const HfPeftPredictor hf;
  const std::vector<Step> steps = {Step{}, Step{.mode = Mode::full}, Step{.seq = 512, .mode = Mode::full},
                                   Step{.lora = {.rank = 64, .targets = TargetSet::all_linear()}},
                                   Step{.mode = Mode::full, .gradient_checkpointing = true, .peak_over = PeakOver::first_step}};
  for (const auto& preset : presets)
    for (const Step& base : steps)
      for (Sharding strategy : {Sharding::zero1, Sharding::zero2, Sharding::full}) {
        CAPTURE(preset.name);
        CAPTURE(to_string(strategy));
        // ZeRO's flat partitions shrink from one rank on. FSDP2 starts all-gathering at two ranks
        // (one rank copies instead: see the world-size-1 case), and pads every tensor's dim 0 to
        // a multiple of the shard count: past a tensor's rows (a LoRA rank of 8 over 16 ranks)
        // its gathered storage grows with the world size, as FSDP2's does. So full sharding is
        // checked from 2 up to the largest power of two that pads nothing, and beyond that only
        // its sharded state (the optimizer step's bytes) must keep shrinking.
        const bool fsdp = strategy == Sharding::full;
        const std::uint64_t first = fsdp ? 2 : 1, last = fsdp ? unpadded_shard_limit(preset.shape, base) : 65536;
        CAPTURE(last);
        REQUIRE(last >= 8);
        Prediction previous = hf.predict(preset.shape, with(base, first, strategy));
        for (std::uint64_t n = first * 2; n <= 65536; n *= 2) {
          CAPTURE(n);
          const Prediction p = hf.predict(preset.shape, with(base, n, strategy));
          CHECK(p.terms[0].bytes[Phase::optimizer_step] <= previous.terms[0].bytes[Phase::optimizer_step]);
          if (n <= last) {
            CHECK(p.peak <= previous.peak);
            for (Phase phase : all_phases) CHECK(p.terms[0].bytes[phase] <= previous.terms[0].bytes[phase]);
          }
          previous = p;
        }
      }
}

TEST_CASE("full sharding needs less per rank than DDP, ZeRO-2 no more than ZeRO-1") {
  const HfPeftPredictor hf;
  for (const auto& preset : presets)
    for (const Step& base : {Step{}, Step{.mode = Mode::full}}) {
      CAPTURE(preset.name);
      const Bytes ddp = hf.predict(preset.shape, with(base, 8, Sharding::none)).peak;
      const Bytes zero1 = hf.predict(preset.shape, with(base, 8, Sharding::zero1)).peak;
      const Bytes zero2 = hf.predict(preset.shape, with(base, 8, Sharding::zero2)).peak;
      const Bytes fsdp = hf.predict(preset.shape, with(base, 8, Sharding::full)).peak;
      CHECK(zero2 <= zero1);
      CHECK(fsdp < ddp);
      // DeepSpeed's reduce bucket (5e8 elements) outweighs DDP's copy of the grads below a
      // billion bf16 parameters (and always for LoRA).
      if (base.mode == Mode::full && preset.shape.parameters() > 2 * bucket_elements) CHECK(zero1 < ddp);
    }
}

TEST_CASE("max_batch is exact at the boundary under every strategy") {
  const HfPeftPredictor hf;
  const LibTorchPredictor lt;
  const std::vector<Step> steps = {with(Step{.seq = 1024}, 8, Sharding::full),
                                   with(Step{.seq = 2048, .mode = Mode::full}, 4, Sharding::zero2),
                                   with(Step{.seq = 512, .mode = Mode::full}, 16, Sharding::zero1),
                                   with(Step{.seq = 4096, .gradient_checkpointing = true}, 2, Sharding::none),
                                   with(Step{.seq = 2048, .mode = Mode::full}, 64, Sharding::hybrid, 8),
                                   with(Step{.seq = 333}, 1, Sharding::full)};
  int positives = 0;
  for (const auto& preset : presets)
    for (std::size_t k = 0; k < steps.size(); ++k)
      for (std::uint64_t gb : {2, 8, 24, 80, 141}) {
        CAPTURE(preset.name);
        CAPTURE(k);
        CAPTURE(gb);
        const Budget budget(Bytes(gb * 1000000000ULL));
        const auto check = [&](const auto& p) {
          const std::uint64_t n = p.max_batch(preset.shape, steps[k], budget);
          Step at = steps[k];
          if (n == 0) {
            at.batch = 1;
            CHECK_FALSE(p.fits(preset.shape, at, budget));
            return;
          }
          ++positives;
          at.batch = n;
          CHECK(p.fits(preset.shape, at, budget));
          at.batch = n + 1;
          if (n < (1ULL << 20)) CHECK_FALSE(p.fits(preset.shape, at, budget));
        };
        check(hf);
        check(lt);
      }
  CHECK(positives > 50);
  // Sharding frees room for the batch: Llama-3.1-8B full fine-tuning does not fit 80 GB alone.
  const ModelShape llama = preset("Llama-3.1-8B");
  const Step full{.seq = 2048, .mode = Mode::full};
  const Budget card(Bytes(80000000000ULL));
  CHECK(hf.max_batch(llama, full, card) == 0);
  CHECK(hf.max_batch(llama, with(full, 8, Sharding::full), card) > 0);
}

TEST_CASE("parse_sharding and sharding_name") {
  CHECK(parse_sharding("none") == ShardingChoice{Sharding::none, 0});
  CHECK(parse_sharding("ZeRO1") == ShardingChoice{Sharding::zero1, 0});
  CHECK(parse_sharding("zero2") == ShardingChoice{Sharding::zero2, 0});
  CHECK(parse_sharding("full") == ShardingChoice{Sharding::full, 0});
  CHECK(parse_sharding("hybrid:8") == ShardingChoice{Sharding::hybrid, 8});
  CHECK(parse_sharding("HYBRID:1") == ShardingChoice{Sharding::hybrid, 1});
  CHECK(parse_sharding("hybrid:65536") == ShardingChoice{Sharding::hybrid, 65536});
  for (const char* bad : {"hybrid:0", "hybrid:x", "hybrid:", "hybrid", "hybrid:-2", "hybrid:4k", "hybrid:65537",
                          "hybrid:99999999999999999999999", "zero3", "", "full:2", "ddp"}) {
    CAPTURE(bad);
    CHECK(field_of([&] { (void)parse_sharding(bad); }) == "--sharding");
  }
  CHECK(field_of([] { (void)parse_sharding("zero", "sharding"); }) == "sharding");
  for (const char* word : {"none", "zero1", "zero2", "full", "hybrid:4"}) {
    const ShardingChoice c = parse_sharding(word);
    Step s;
    s.world_size = 8;
    s.sharding = c.sharding;
    s.shard_group = c.shard_group;
    CHECK(sharding_name(s) == word);
  }
  CHECK(describe_sharding(Step{}).empty());
  CHECK(describe_sharding(with(Step{}, 8, Sharding::none)) == "DDP over 8 ranks");
  CHECK(describe_sharding(with(Step{}, 1, Sharding::full)) == "full sharding over 1 rank");
  CHECK(describe_sharding(with(Step{}, 16, Sharding::hybrid, 4)) == "hybrid sharding (groups of 4) over 16 ranks");
}

TEST_CASE("bad world sizes and shard groups are named") {
  const auto invalid = [](const Step& s) { return field_of([&] { validate(s, small); }); };
  CHECK(invalid(with(Step{}, 0, Sharding::none)) == "world size");
  CHECK(invalid(with(Step{}, 65537, Sharding::full)) == "world size");
  CHECK(invalid(with(Step{}, 65536, Sharding::full)) == "<no error>");
  CHECK(invalid(with(Step{}, 1, Sharding::zero1)) == "<no error>");  // zero and full on one rank are allowed
  CHECK(invalid(with(Step{}, 1, Sharding::full)) == "<no error>");
  CHECK(invalid(with(Step{}, 4, Sharding::hybrid, 0)) == "shard group");
  CHECK(invalid(with(Step{}, 4, Sharding::hybrid, 3)) == "shard group");
  CHECK(invalid(with(Step{}, 4, Sharding::hybrid, 8)) == "shard group");
  CHECK(invalid(with(Step{}, 12, Sharding::hybrid, 3)) == "<no error>");
  CHECK(invalid(with(Step{}, 4, Sharding::full, 2)) == "shard group");  // a group only for hybrid
  const HfPeftPredictor hf;
  const Budget unlimited{Bytes(std::numeric_limits<std::uint64_t>::max())};
  CHECK_THROWS_AS((void)hf.predict(small, with(Step{}, 0, Sharding::none)), InvalidInput);
  CHECK_THROWS_AS((void)hf.max_batch(small, with(Step{}, 6, Sharding::hybrid, 4), unlimited), InvalidInput);
  CHECK_THROWS_AS((void)hf.max_seq(small, with(Step{}, 70000, Sharding::zero2), unlimited), InvalidInput);
}

TEST_CASE("the shard count of each strategy") {
  CHECK(Step{}.shard_count() == 1);
  CHECK(with(Step{}, 8, Sharding::none).shard_count() == 1);
  CHECK(with(Step{}, 8, Sharding::zero1).shard_count() == 8);
  CHECK(with(Step{}, 8, Sharding::zero2).shard_count() == 8);
  CHECK(with(Step{}, 8, Sharding::full).shard_count() == 8);
  CHECK(with(Step{}, 8, Sharding::hybrid, 2).shard_count() == 2);
  CHECK(Step{}.single_gpu());
  CHECK_FALSE(with(Step{}, 1, Sharding::full).single_gpu());
  CHECK_FALSE(with(Step{}, 2, Sharding::none).single_gpu());
}

// Compile time: a per-rank fit check is a constant expression too.
static_assert(HfPeftPredictor{}.predict(small, with(full_step, 4, Sharding::full)).peak <
              HfPeftPredictor{}.predict(small, full_step).peak);
