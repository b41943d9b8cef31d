#pragma once
/// @file probe/trace.hpp
/// `AllocatorTraceRecorder`: every request and free the CUDA caching allocator serves on one device
/// while it records, in order, with named marks between them (phases, decoder layers). The same
/// form as tests/validation/trace_capture.py writes for HF steps, so that
/// tests/validation/trace_program.py turns the Probe's reference step into step programs too.
///
/// It listens through `c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker`, whose
/// callback the allocator calls for each trace entry, under its own lock, whether or not history
/// recording is on, once CUDA is initialised (the recorder initialises it). A tracker cannot be
/// detached: one is attached per process, on first use, and forwards to the recorder that is
/// active (at most one at a time), or does nothing.

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "vramfit/error.hpp"

namespace vramfit::probe {

/// What a recorder saw. `events`: a positive n requests n bytes; a negative -k frees the k-th
/// request (1-based, counting requests in order). Frees of blocks requested before recording
/// began are left out. `marks`: (events before the mark, label).
struct AllocatorTrace {
  std::vector<std::int64_t> events;
  std::vector<std::pair<std::size_t, std::string>> marks;
  std::vector<std::uint64_t> addresses;  ///< of each request, in order
  /// Each segment the allocator opened: (events before it, address, bytes).
  std::vector<std::array<std::uint64_t, 3>> segments;
};

class AllocatorTraceRecorder;

namespace detail {
struct TraceHub {
  std::mutex mutex;
  AllocatorTraceRecorder* active = nullptr;
};
inline TraceHub& trace_hub() {
  static TraceHub hub;
  return hub;
}
}  // namespace detail

/// Records while it lives (or until `stop`). One at a time per process.
class AllocatorTraceRecorder {
 public:
  explicit AllocatorTraceRecorder(int device) : device_(device) {
    attach_once();
    auto& hub = detail::trace_hub();
    const std::lock_guard<std::mutex> lock(hub.mutex);
    if (hub.active != nullptr) throw InvalidInput("trace", "another allocator trace is being recorded");
    hub.active = this;
  }
  AllocatorTraceRecorder(const AllocatorTraceRecorder&) = delete;
  AllocatorTraceRecorder& operator=(const AllocatorTraceRecorder&) = delete;
  ~AllocatorTraceRecorder() { stop(); }

  /// Ends the recording; what was recorded stays readable.
  void stop() {
    auto& hub = detail::trace_hub();
    const std::lock_guard<std::mutex> lock(hub.mutex);
    if (hub.active == this) hub.active = nullptr;
  }

  /// A named point between events (from any thread).
  void mark(std::string label) {
    const std::lock_guard<std::mutex> lock(detail::trace_hub().mutex);
    trace_.marks.emplace_back(trace_.events.size(), std::move(label));
  }

  /// What was recorded; call after `stop` (or while nothing else runs on the device).
  [[nodiscard]] const AllocatorTrace& trace() const { return trace_; }

 private:
  static void attach_once() {
    static const bool attached = [] {
      // The allocator attaches a tracker to the device allocators that exist: initialise CUDA first.
      at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
      c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker([](const auto& entry) {
        using Entry = std::decay_t<decltype(entry)>;
        auto& hub = detail::trace_hub();
        const std::lock_guard<std::mutex> lock(hub.mutex);
        if (hub.active == nullptr || static_cast<int>(entry.device_) != hub.active->device_) return;
        AllocatorTrace& t = hub.active->trace_;
        const auto addr = static_cast<std::uint64_t>(entry.addr_);
        if (entry.action_ == Entry::SEGMENT_ALLOC) {
          t.segments.push_back({t.events.size(), addr, static_cast<std::uint64_t>(entry.size_)});
        } else if (entry.action_ == Entry::ALLOC) {
          t.events.push_back(static_cast<std::int64_t>(entry.size_));
          t.addresses.push_back(addr);
          hub.active->ordinal_[addr] = static_cast<std::int64_t>(t.addresses.size());
        } else if (entry.action_ == Entry::FREE_COMPLETED) {
          const auto it = hub.active->ordinal_.find(addr);
          if (it == hub.active->ordinal_.end()) return;  // requested before recording began
          t.events.push_back(-it->second);
          hub.active->ordinal_.erase(it);
        }
      });
      return true;
    }();
    (void)attached;
  }

  int device_;
  AllocatorTrace trace_;
  std::unordered_map<std::uint64_t, std::int64_t> ordinal_;  // live requests: address -> ordinal
};

}  // namespace vramfit::probe
