#pragma once
/// @file probe/meter.hpp
/// `PeakMeter`: the CUDA caching allocator's own counters for one device, read the way
/// `torch.cuda.max_memory_allocated()` reads them. Every CUDA-specific call of the probe lives
/// here; the other probe headers use ATen and LibTorch only. Which PyTorch releases these c10 names
/// were checked against: tests/validation/README.md#the-probes-meter

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"

namespace at::cuda {
// Exported by libtorch_cuda since 1.13; declared again because some releases moved its header.
void clearCublasWorkspaces();
}  // namespace at::cuda

namespace vramfit::probe {

/// Allocator figures around one call: what was allocated before it, and the peaks during it.
/// All three are absolute (the baseline is inside the peaks), as `max_memory_allocated()` is.
struct Measurement {
  Bytes baseline;        ///< allocated bytes when the call started
  Bytes peak_allocated;  ///< peak of allocated bytes during the call
  Bytes peak_reserved;   ///< peak of reserved bytes (allocated + cached) during the call

  /// What the call added on top of the baseline at its peak.
  [[nodiscard]] Bytes extra() const { return peak_allocated < baseline ? Bytes{} : peak_allocated - baseline; }
};

namespace detail {
/// Throws `InvalidInput` ("device") unless `device` names a visible CUDA device.
inline c10::DeviceIndex checked_device(int device) {
  if (!torch::cuda::is_available())
    throw InvalidInput("device", "no CUDA device is available: the probe needs one (LibTorch sees none)");
  const auto count = static_cast<std::int64_t>(torch::cuda::device_count());
  if (device < 0 || device >= count)
    throw InvalidInput("device", "must be between 0 and " + std::to_string(count - 1) + ", got " + std::to_string(device));
  return static_cast<c10::DeviceIndex>(device);
}

inline Bytes non_negative(std::int64_t v) { return Bytes(v < 0 ? 0 : static_cast<std::uint64_t>(v)); }

// StatType::AGGREGATE: the sum over the small (<= 1 MiB) and large pools.
inline constexpr std::size_t aggregate = static_cast<std::size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);

/// A one-node autograd function whose backward clears the cuBLAS workspaces of the autograd engine's
/// thread, which some releases can only release from that thread.
struct ClearBlasWorkspacesInBackward : torch::autograd::Function<ClearBlasWorkspacesInBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const torch::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grads) {
    at::cuda::clearCublasWorkspaces();
    return {grads.at(0)};
  }
};
}  // namespace detail

/**
 * The caching allocator's counters for one CUDA device.
 *
 *     vramfit::probe::PeakMeter meter(0);
 *     auto m = meter.measure([&] { trainer.step(); });   // synchronizes before reading
 *     fmt::print("step peak {} GB over {} GB\n", m.peak_allocated.gigabytes(), m.baseline.gigabytes());
 *
 * Allocated bytes are what `torch.cuda.memory_allocated()` reports: every live block, rounded up
 * to the allocator's 512 B granularity, the cuBLAS workspaces included; the CUDA context is not.
 */
class PeakMeter {
  // c10::CachingDeviceAllocator::DeviceStats in 2.11 (c10::cuda::CUDACachingAllocator::DeviceStats
  // before the device-generic allocator interface): named by what getDeviceStats returns.
  using Stats = decltype(c10::cuda::CUDACachingAllocator::getDeviceStats(c10::DeviceIndex{0}));

public:
  /// Throws `InvalidInput` ("device") when there is no such CUDA device.
  explicit PeakMeter(int device = 0) : device_(detail::checked_device(device)) {}

  [[nodiscard]] int device() const { return device_; }

  /// Waits for every kernel on the device, so that frees deferred to stream completion are done.
  void synchronize() const { torch::cuda::synchronize(device_); }

  /// Starts a new peak: every peak counter is set to its current value.
  void reset() {
    synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_);
  }

  [[nodiscard]] Bytes allocated() const { return detail::non_negative(stats().allocated_bytes[detail::aggregate].current); }
  [[nodiscard]] Bytes reserved() const { return detail::non_negative(stats().reserved_bytes[detail::aggregate].current); }
  /// Peak of allocated bytes since the last `reset()` (or the start of the process).
  [[nodiscard]] Bytes peak_allocated() const { return detail::non_negative(stats().allocated_bytes[detail::aggregate].peak); }
  [[nodiscard]] Bytes peak_reserved() const { return detail::non_negative(stats().reserved_bytes[detail::aggregate].peak); }

  /// Returns the cached, unallocated blocks to the driver (`torch.cuda.empty_cache()`).
  void empty_cache() {
    synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  /// Frees the cuBLAS workspaces PyTorch keeps after a thread's first matmul (32 MiB each on sm90),
  /// this thread's and the autograd engine's, as in a fresh process; `empty_cache()` does not.
  void release_blas_workspaces() {
    synchronize();
    at::cuda::clearCublasWorkspaces();  // this thread's (every thread's where the map is global)
    {
      const c10::cuda::CUDAGuard on_device(device_);
      torch::Tensor x = torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, device_)).requires_grad_(true);
      detail::ClearBlasWorkspacesInBackward::apply(x).sum().backward();  // the engine thread's
    }
    synchronize();
  }

  /**
   * Runs `step()` and returns the allocated bytes before it and the peaks during it. Resets the
   * peak counters first; synchronizes before every read.
   *
   * @tparam F a callable taking no arguments.
   */
  template <class F>
  Measurement measure(F&& step) {
    synchronize();
    Measurement m;
    m.baseline = allocated();
    reset();
    std::forward<F>(step)();
    synchronize();
    m.peak_allocated = peak_allocated();
    m.peak_reserved = peak_reserved();
    return m;
  }

private:
  [[nodiscard]] Stats stats() const { return c10::cuda::CUDACachingAllocator::getDeviceStats(device_); }

  c10::DeviceIndex device_;
};

/// Makes `device` the current CUDA device for its lifetime (cuBLAS handles, SDPA's choice of
/// kernel and the engine read the current device).
class DeviceScope {
public:
  explicit DeviceScope(int device) : guard_(detail::checked_device(device)) {}

private:
  c10::cuda::CUDAGuard guard_;
};

/**
 * Caps what the caching allocator may reserve on `device` at `fraction` of the card's total
 * memory, for its lifetime; restores 1.0 (no cap) when it ends. A request past the cap raises
 * `c10::OutOfMemoryError`, as a real card would at its size.
 */
class MemoryFraction {
public:
  MemoryFraction(int device, double fraction) : device_(detail::checked_device(device)) {
    if (!(fraction > 0.0 && fraction <= 1.0))
      throw InvalidInput("memory fraction", "must be in (0, 1], got " + std::to_string(fraction));
    // c10 refuses a fraction ("Allocator not initialized for device") until the CUDA hooks have
    // set the allocator up; creating an empty CUDA tensor does that (torch.cuda._lazy_init's part)
    // without allocating a block.
    (void)torch::empty({0}, torch::TensorOptions().device(torch::kCUDA, device_));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device_);
  }
  /// The fraction of `device`'s memory that leaves `allowed` bytes to the allocator.
  static double for_bytes(int device, Bytes allowed);

  MemoryFraction(const MemoryFraction&) = delete;
  MemoryFraction& operator=(const MemoryFraction&) = delete;
  ~MemoryFraction() { c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, device_); }

private:
  c10::DeviceIndex device_;
};

/// What the CUDA runtime says about a device.
struct DeviceFacts {
  std::string name;
  Bytes total_memory;
  int compute_major = 0;
  int compute_minor = 0;
};

inline DeviceFacts device_facts(int device) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(detail::checked_device(device));
  return {std::string(p->name), Bytes(static_cast<std::uint64_t>(p->totalGlobalMem)), p->major, p->minor};
}

inline double MemoryFraction::for_bytes(int device, Bytes allowed) {
  const double total = static_cast<double>(device_facts(device).total_memory.count());
  const double f = static_cast<double>(allowed.count()) / total;
  return f > 1.0 ? 1.0 : f;
}

/// The CUDA version the installed driver supports (`cudaDriverGetVersion`: 13000 for 13.0); 0 if
/// the call fails.
inline int cuda_driver_version() {
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess ? v : 0;
}

/// The CUDA runtime the process runs (`cudaRuntimeGetVersion`: 13000 for 13.0); 0 if the call fails.
inline int cuda_runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : 0;
}

/// The NVIDIA kernel driver's version ("580.126.09"), read from /proc/driver/nvidia/version where
/// the driver publishes it; empty when that file cannot be read (a container may hide it).
inline std::string nvidia_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.126.09  Tue ..." : the first word made of
  // digits and dots with at least one dot.
  std::istringstream words(line);
  std::string w;
  while (words >> w) {
    bool digits_and_dots = !w.empty();
    bool has_dot = false;
    for (char c : w) {
      if (c == '.') has_dot = true;
      else if (c < '0' || c > '9') digits_and_dots = false;
    }
    if (digits_and_dots && has_dot) return w;
  }
  return {};
}

/// "13.0" for 13000.
inline std::string cuda_version_string(int v) {
  if (v <= 0) return {};
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace vramfit::probe
