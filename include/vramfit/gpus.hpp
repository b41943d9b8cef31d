#pragma once
/// @file gpus.hpp
/// Common cards and the budget each leaves to PyTorch's caching allocator: the memory the CUDA
/// runtime reports (`totalGlobalMem`, what `torch.cuda.get_device_properties().total_memory`
/// shows) less what the driver holds outside torch's statistics (the context, cuBLAS handles,
/// loaded kernels). The H200's figures were measured (tests/data/cuda_context_h200.jsonl); for the
/// other cards the total is the lowest Linux figure found in public logs and the driver's share is
/// the H200's, so their budgets are estimates that err low. Sources: tests/validation/README.md#cards
///
///     const vramfit::Gpu& card = vramfit::gpu("RTX 4090");
///     if (vramfit::estimate(shape, step).fits(card.allocator_budget())) ...;

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"

namespace vramfit {

/// What the driver held on the H200 beyond torch's reserved bytes once a training step's kernels
/// had run (context, cuBLAS and cuBLASLt handles, modules): `cudaMemGetInfo`'s used bytes less
/// `memory_reserved()`, the same in every fresh process and with expandable segments.
inline constexpr std::uint64_t driver_held_h200 = 804'061'184;

/// A card vramfit knows by name.
struct Gpu {
  std::string_view name;         ///< as users type it (matched case-insensitively, spaces or dashes alike)
  std::uint64_t total_bytes;     ///< the memory CUDA reports on the card
  bool measured;                 ///< the total and the driver's share measured here, not estimated
  std::uint64_t driver_bytes = driver_held_h200;  ///< held by the driver outside torch's statistics

  /// What the caching allocator may reserve on the card: the `--budget` the card stands for.
  [[nodiscard]] constexpr Bytes allocator_budget() const { return Bytes(total_bytes - driver_bytes); }
};

/// MiB as CUDA and nvidia-smi print them.
constexpr std::uint64_t mib(std::uint64_t n) { return n << 20; }

inline constexpr std::array gpus = {
    Gpu{"RTX-3050-Laptop-4GB", 4'084'137'984, false},  // deviceQuery, Linux, CUDA 12.4: 3895 MiB
    Gpu{"T4", 15'642'329'088, false},                   // deviceQuery, AWS, CUDA 12.5: 14918 MiB
    Gpu{"RTX-4090", 24'146'083'840, false},             // deviceQuery, CUDA 12.6: 23028 MiB (Linux drivers: up to 24210)
    Gpu{"L4", 23'570'219'008, false},                   // deviceQuery, driver 550.90.07: 22478 MiB
    Gpu{"A10G", mib(22513), false},                     // torch 2.1 log (ultralytics#7673)
    Gpu{"A100-40GB", mib(40326), false},                // torch 1.9 _CudaDeviceProperties, A100-PCIE-40GB
    Gpu{"A100-80GB", mib(81038), false},                // ultralytics logs, A100-SXM4-80GB
    Gpu{"H100-80GB", mib(81008), false},                // torch _CudaDeviceProperties, H100 PCIe
    Gpu{"H200", 150'109'880'320, true},                 // measured: tests/data/cuda_context_h200.jsonl
};

namespace detail {
/// Equal ignoring case, with ' ', '-' and '_' alike ("rtx 4090" names "RTX-4090").
constexpr bool card_name_equals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  auto fold = [](char c) {
    if (c == ' ' || c == '_') return '-';
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  };
  for (std::size_t i = 0; i < a.size(); ++i)
    if (fold(a[i]) != fold(b[i])) return false;
  return true;
}
}  // namespace detail

/// The card named `name`; `InvalidInput` naming `field` and listing the known cards otherwise.
inline const Gpu& gpu(std::string_view name, std::string_view field = "gpu") {
  for (const Gpu& g : gpus)
    if (detail::card_name_equals(g.name, name)) return g;
  std::string known;
  for (const Gpu& g : gpus) known += (known.empty() ? "" : ", ") + std::string(g.name);
  throw InvalidInput(std::string(field), "unknown card '" + std::string(name) + "'; known: " + known +
                                             " (or give --budget SIZE)");
}

static_assert(gpus[8].allocator_budget().count() == 150'109'880'320 - 804'061'184);

}  // namespace vramfit
