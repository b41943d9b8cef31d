#pragma once
/// @file model.hpp
/// The shape of a decoder-only language model (Llama / Qwen2 / Mistral style) and the counts
/// derived from it. Only shapes matter for memory: no weights are ever read.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"
#include "vramfit/detail/enum_names.hpp"

namespace vramfit {

/// The linear projections of one decoder layer, by their Hugging Face names.
enum class Module : std::uint8_t { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
inline constexpr Module all_modules[] = {Module::q_proj,    Module::k_proj,  Module::v_proj,   Module::o_proj,
                                         Module::gate_proj, Module::up_proj, Module::down_proj};

VRAMFIT_ENUM_NAMES(Module, "module",
                   {Module::q_proj, "q_proj"}, {Module::k_proj, "k_proj"}, {Module::v_proj, "v_proj"},
                   {Module::o_proj, "o_proj"}, {Module::gate_proj, "gate_proj"}, {Module::up_proj, "up_proj"},
                   {Module::down_proj, "down_proj"});
constexpr std::string_view to_string(Module m) { return detail::enum_name(m); }

/// Input and output width of a linear projection.
struct ModuleDims {
  std::uint64_t in = 0;
  std::uint64_t out = 0;
};

/**
 * Shape of a decoder-only model: embeddings, `layers` decoder layers (RMSNorm, grouped-query
 * attention with rotary embeddings, RMSNorm, MLP), a final RMSNorm and an lm_head.
 *
 *     ModelShape m{.vocab = 49152, .hidden = 576, .intermediate = 1536, .layers = 30,
 *                  .heads = 9, .kv_heads = 3, .head_dim = 64, .tied_embeddings = true};
 */
struct ModelShape {
  std::uint64_t vocab = 0;         ///< vocabulary size (rows of the embedding and lm_head)
  std::uint64_t hidden = 0;        ///< model width h
  std::uint64_t intermediate = 0;  ///< MLP width i
  std::uint64_t layers = 0;        ///< decoder layers
  std::uint64_t heads = 0;         ///< query heads
  std::uint64_t kv_heads = 0;      ///< key/value heads (GQA); equal to heads for MHA
  std::uint64_t head_dim = 0;      ///< per-head width; 0 means hidden / heads
  bool tied_embeddings = false;    ///< lm_head shares the embedding matrix
  bool qkv_bias = false;           ///< q/k/v projections carry a bias (Qwen2)
  bool gated_mlp = true;           ///< SwiGLU (gate, up, down); false: up, activation, down
  bool qk_norm = false;            ///< an RMSNorm over each head of q and of k (Qwen3's q_norm, k_norm)

  [[nodiscard]] constexpr std::uint64_t head_dimension() const { return head_dim != 0 ? head_dim : hidden / heads; }
  /// Width of the query projection's output (heads x head_dim).
  [[nodiscard]] constexpr std::uint64_t q_width() const { return detail::checked_mul(heads, head_dimension()); }
  /// Width of the key (and value) projection's output (kv_heads x head_dim).
  [[nodiscard]] constexpr std::uint64_t kv_width() const { return detail::checked_mul(kv_heads, head_dimension()); }

  /// Whether the model has this projection (a non-gated MLP has no gate_proj).
  [[nodiscard]] constexpr bool has(Module m) const { return gated_mlp || m != Module::gate_proj; }

  [[nodiscard]] constexpr ModuleDims dims(Module m) const {
    switch (m) {
      case Module::q_proj: return {hidden, q_width()};
      case Module::k_proj:
      case Module::v_proj: return {hidden, kv_width()};
      case Module::o_proj: return {q_width(), hidden};
      case Module::gate_proj:
      case Module::up_proj: return {hidden, intermediate};
      case Module::down_proj: return {intermediate, hidden};
    }
    return {};
  }

  /// Parameters of one decoder layer: projections, q/k/v biases, two RMSNorm weights (four with
  /// q/k norms, head_dim each).
  [[nodiscard]] constexpr std::uint64_t layer_parameters() const {
    using detail::checked_add;
    using detail::checked_mul;
    const std::uint64_t q = q_width(), kv = kv_width();
    // q, k, v: hidden -> q, kv, kv; o: q -> hidden; MLP: (gated ? 3 : 2) x hidden x intermediate.
    std::uint64_t n = checked_mul(hidden, checked_add(checked_add(q, q), checked_add(kv, kv)));
    n = checked_add(n, checked_mul(checked_mul(hidden, intermediate), gated_mlp ? 3 : 2));
    if (qkv_bias) n = checked_add(n, checked_add(q, checked_add(kv, kv)));
    if (qk_norm) n = checked_add(n, checked_mul(2, head_dimension()));
    return checked_add(n, checked_add(hidden, hidden));
  }
  /// Parameters of the embedding matrix (vocab x hidden).
  [[nodiscard]] constexpr std::uint64_t embedding_parameters() const { return detail::checked_mul(vocab, hidden); }
  /// All parameters: embeddings, layers, final norm, and an untied lm_head.
  [[nodiscard]] constexpr std::uint64_t parameters() const {
    std::uint64_t n = detail::checked_mul(layer_parameters(), layers);
    n = detail::checked_add(n, embedding_parameters());
    if (!tied_embeddings) n = detail::checked_add(n, embedding_parameters());
    return detail::checked_add(n, hidden);
  }
  /// The largest single parameter tensor (what per-tensor optimizer temporaries are sized by).
  [[nodiscard]] constexpr std::uint64_t largest_tensor() const {
    std::uint64_t n = embedding_parameters();
    for (Module m : all_modules)
      if (has(m)) {
        const auto d = dims(m);
        const auto e = detail::checked_mul(d.in, d.out);
        if (e > n) n = e;
      }
    return n;
  }

  friend constexpr bool operator==(const ModelShape&, const ModelShape&) = default;
};

/**
 * The largest shape `validate` accepts. Each bound is about twice to sixteen times the largest of
 * any published dense decoder-only LM (126 layers: Llama-3.1-405B; width 20480: MT-NLG 530B; MLP
 * 73728: PaLM 540B; 128 query heads; head_dim 256: Gemma; vocabulary 262144: Gemma 3), so that
 * a mistyped config is refused rather than predicted, no product of them leaves 64 bits, and no
 * shape makes the allocator simulation run for long: its time grows with the layers (about as
 * layers^1.5), and at 256 layers one `estimate` takes about 1 s.
 */
struct ShapeLimits {
  static constexpr std::uint64_t vocab = 1ULL << 22;         // 4,194,304
  static constexpr std::uint64_t hidden = 1ULL << 16;        // 65,536
  static constexpr std::uint64_t intermediate = 1ULL << 18;  // 262,144
  static constexpr std::uint64_t layers = 256;
  static constexpr std::uint64_t heads = 1024;
  static constexpr std::uint64_t head_dim = 1024;
};

namespace detail {
/// The throw, out of line so that `require_range` inlines to two compares on the hot path.
[[noreturn]] inline void out_of_range(std::string_view field, std::uint64_t v, std::uint64_t lo, std::uint64_t hi,
                                      std::string_view note) {
  throw InvalidInput(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                                std::to_string(v) + (note.empty() ? "" : " (" + std::string(note) + ")"));
}
constexpr void require_range(std::string_view field, std::uint64_t v, std::uint64_t lo, std::uint64_t hi,
                             std::string_view note = {}) {
  if (v < lo || v > hi) out_of_range(field, v, lo, hi, note);
}
inline constexpr std::string_view beyond_real_models = "vramfit's bound, well above every published model";
/// The largest shape within `ShapeLimits`, to prove that its parameter count fits in 64 bits.
inline constexpr ModelShape largest_shape{.vocab = ShapeLimits::vocab, .hidden = ShapeLimits::hidden,
                                          .intermediate = ShapeLimits::intermediate, .layers = ShapeLimits::layers,
                                          .heads = ShapeLimits::heads, .kv_heads = ShapeLimits::heads,
                                          .head_dim = ShapeLimits::head_dim, .qkv_bias = true};
static_assert(largest_shape.parameters() < (1ULL << 50), "ShapeLimits keep parameter counts far inside 64 bits");
}  // namespace detail

/// Throws `InvalidInput` naming the first field that is out of range (`ShapeLimits`) or inconsistent.
constexpr void validate(const ModelShape& m) {
  using detail::beyond_real_models;
  using detail::require_range;
  require_range("vocab", m.vocab, 1, ShapeLimits::vocab, beyond_real_models);
  require_range("hidden", m.hidden, 1, ShapeLimits::hidden, beyond_real_models);
  require_range("intermediate", m.intermediate, 1, ShapeLimits::intermediate, beyond_real_models);
  require_range("layers", m.layers, 1, ShapeLimits::layers, beyond_real_models);
  require_range("heads", m.heads, 1, ShapeLimits::heads, beyond_real_models);
  require_range("kv_heads", m.kv_heads, 1, m.heads);
  if (m.heads % m.kv_heads != 0)
    throw InvalidInput("kv_heads", "must divide heads (" + std::to_string(m.heads) + "), got " + std::to_string(m.kv_heads));
  if (m.head_dim == 0 && m.hidden % m.heads != 0)
    throw InvalidInput("head_dim", "is not given and hidden (" + std::to_string(m.hidden) +
                                       ") is not a multiple of heads (" + std::to_string(m.heads) + "); give head_dim");
  require_range("head_dim", m.head_dimension(), 1, ShapeLimits::head_dim, beyond_real_models);
}

}  // namespace vramfit
