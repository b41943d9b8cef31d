#pragma once
/// @file phase.hpp
/// The moments of a training step at which the live set can peak. A step's peak is the largest
/// of them, never one sum: long sequences peak in the backward of the loss, full fine-tuning of
/// short sequences in the optimizer step, checkpointed steps of small-vocabulary models in the
/// backward of the first decoder layer to be recomputed.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "vramfit/bytes.hpp"
#include "vramfit/detail/enum_names.hpp"

namespace vramfit {

enum class Phase : std::uint8_t {
  forward,          ///< end of the forward, inside the loss: logits, their fp32 copy, the log-softmax
  loss_backward,    ///< backward of log-softmax / NLL: three loss-sized buffers and every saved activation
  backward_top,     ///< backward of the last decoder layer (first to be processed): all activations, no grads yet
  backward_bottom,  ///< backward of the first decoder layer and the embedding: (nearly) all grads, few activations
  optimizer_step,   ///< AdamW update: weights, grads, both moments, and the update's temporaries
};
inline constexpr std::size_t phase_count = 5;
inline constexpr std::array<Phase, phase_count> all_phases = {Phase::forward, Phase::loss_backward, Phase::backward_top,
                                                             Phase::backward_bottom, Phase::optimizer_step};

constexpr std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::loss_backward: return "loss backward";
    case Phase::backward_top: return "backward (last layer)";
    case Phase::backward_bottom: return "backward (first layer)";
    case Phase::optimizer_step: return "optimizer step";
  }
  return "?";
}
/// Machine names ("loss_backward"), for JSON: `to_key` and `parse_phase`.
VRAMFIT_ENUM_NAMES(Phase, "phase",
                   {Phase::forward, "forward"}, {Phase::loss_backward, "loss_backward"},
                   {Phase::backward_top, "backward_top"}, {Phase::backward_bottom, "backward_bottom"},
                   {Phase::optimizer_step, "optimizer_step"});
constexpr std::string_view to_key(Phase p) { return detail::enum_name(p); }
constexpr Phase parse_phase(std::string_view key, std::string_view field = "phase") {
  return detail::parse_enum<Phase>(key, field);
}

/// What one cost term keeps live at each phase's peak moment.
struct PhaseBytes {
  std::array<Bytes, phase_count> at{};

  constexpr Bytes& operator[](Phase p) { return at[static_cast<std::size_t>(p)]; }
  constexpr const Bytes& operator[](Phase p) const { return at[static_cast<std::size_t>(p)]; }
  /// Adds `b` to every phase.
  constexpr PhaseBytes& add_everywhere(Bytes b) {
    for (auto& x : at) x += b;
    return *this;
  }
  friend constexpr bool operator==(const PhaseBytes&, const PhaseBytes&) = default;
};

}  // namespace vramfit
