#pragma once
/// @file allocator.hpp
/// `CachingAllocatorModel`: the block logic of c10's CUDA caching allocator (512 B rounding, small
/// and large pools, best fit, split and merge rules), replayed on a sequence of requests to give
/// the allocated bytes `torch.cuda.max_memory_allocated` reports. With the recorded segment
/// addresses it reproduces the H200 traces in tests/data/traces/ to the byte. Rules, sources and
/// the placement orders: tests/validation/README.md#allocator-model

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"

namespace vramfit::detail {

/// The caching allocator's block logic, replayed on requests. Not thread-safe.
class CachingAllocatorModel {
 public:
  /// Names one live allocation, from `malloc` until its `free`; after that it may name another.
  using Handle = std::size_t;
  /// The handle of a zero-byte request, which takes no block (freeing it does nothing).
  static constexpr Handle null_handle = static_cast<Handle>(-1);

  static constexpr std::uint64_t kMinBlockSize = 512;            // every size rounds up to this
  static constexpr std::uint64_t kSmallSize = 1ULL << 20;        // largest small-pool request
  static constexpr std::uint64_t kSmallBuffer = 2ULL << 20;      // small-pool segment
  static constexpr std::uint64_t kLargeBuffer = 20ULL << 20;     // segment for requests under kMinLargeAlloc
  static constexpr std::uint64_t kMinLargeAlloc = 10ULL << 20;
  static constexpr std::uint64_t kRoundLarge = 2ULL << 20;       // larger segments round up to this

  /// The driver's headrooms the simulation runs (`vramfit/detail/simulate.hpp`): 0 to 512 MiB in 128 MiB
  /// steps; the recorded processes had up to about 500 MiB of such space before their steps.
  static constexpr std::uint64_t kDriverHeadroomStep = 128ULL << 20;
  static constexpr std::uint64_t kDriverHeadroomMax = 512ULL << 20;

  /// The scattered placements the simulation runs (seeds 1 to this), besides the plain and the
  /// driver's orders.
  static constexpr std::uint64_t kScatteredPlacements = 32;

  /// The order of the addresses new segments take: each above the last, each below the last, the
  /// GPU driver's placement, or seeded pseudo-random addresses (the placements no rule reproduces).
  enum class AddressOrder : std::uint8_t { ascending, descending, driver, scattered };

  CachingAllocatorModel() = default;
  /// `headroom`: with `AddressOrder::driver`, the free space (a multiple of 2 MiB) the driver holds
  /// before the first segment; with `AddressOrder::scattered`, the seed of the addresses; ignored
  /// otherwise.
  explicit CachingAllocatorModel(AddressOrder order, std::uint64_t headroom = 0) : order_(order) {
    if (order_ == AddressOrder::descending) next_address_ = 1ULL << 62;
    if (order_ == AddressOrder::scattered) seed_ = headroom;
    if (order_ == AddressOrder::driver) {
      if (headroom % kRoundLarge != 0 || headroom > (1ULL << 40))
        throw InvalidInput("headroom", "must be a multiple of 2 MiB, at most 1 TiB");
      next_address_ = kDriverTop - headroom;
      if (headroom != 0) holes_.emplace(next_address_, kDriverTop);
    }
  }

  /// The address the next segment opened takes (once), instead of the order's next one: to replay
  /// a trace with the addresses the GPU driver gave.
  void place_next_segment(std::uint64_t address) { next_segment_at_ = address; }

  /// The size a request of `bytes` rounds up to.
  static constexpr std::uint64_t round_size(std::uint64_t bytes) {
    if (bytes < kMinBlockSize) return kMinBlockSize;
    return detail::checked_add(bytes, kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
  }
  /// The size of the segment a request of `rounded` bytes opens when no free block fits it.
  static constexpr std::uint64_t segment_size(std::uint64_t rounded) {
    if (rounded <= kSmallSize) return kSmallBuffer;
    if (rounded < kMinLargeAlloc) return kLargeBuffer;
    return detail::checked_add(rounded, kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  }

  /// Serves a request of `bytes`; returns the handle to free it with.
  Handle malloc(std::uint64_t bytes) {
    if (bytes == 0) return null_handle;
    const std::uint64_t size = round_size(bytes);
    const bool small = size <= kSmallSize;
    auto& pool = small ? small_ : large_;
    Handle b;
    if (auto it = pool.lower_bound(PoolEntry{size, 0, 0}); it != pool.end()) {
      b = it->block;
      pool.erase(it);
    } else {
      const std::uint64_t seg = segment_size(size);
      if (next_segment_at_ != 0) {
        b = make_block(next_segment_at_, seg, small);
        next_segment_at_ = 0;
      } else if (order_ == AddressOrder::driver) {
        b = make_block(driver_place(seg), seg, small);
      } else if (order_ == AddressOrder::scattered) {
        b = make_block(scattered_place(), seg, small);
      } else if (order_ == AddressOrder::descending) {
        next_address_ = detail::checked_sub(next_address_, seg);
        b = make_block(next_address_, seg, small);
      } else {
        b = make_block(next_address_, seg, small);
        next_address_ = detail::checked_add(next_address_, seg);
      }
      reserved_ = detail::checked_add(reserved_, seg);
      ++segments_;
    }
    Block& block = blocks_[b];
    const std::uint64_t rest = block.size - size;
    if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
      const Handle r = make_block(blocks_[b].address + size, rest, small);  // may reallocate blocks_
      Block& head = blocks_[b];
      Block& tail = blocks_[r];
      tail.prev = b;
      tail.next = head.next;
      if (head.next != null_handle) blocks_[head.next].prev = r;
      head.next = r;
      head.size = size;
      pool.insert(PoolEntry{tail.size, tail.address, r});
    }
    Block& used = blocks_[b];
    used.allocated = true;
    used.requested = bytes;
    allocated_ = detail::checked_add(allocated_, used.size);
    requested_ = detail::checked_add(requested_, bytes);
    if (allocated_ > peak_allocated_) peak_allocated_ = allocated_;
    if (requested_ > peak_requested_) peak_requested_ = requested_;
    return b;
  }

  /// Frees the allocation `h` names; merges its block with free neighbours.
  void free(Handle h) {
    if (h == null_handle) return;
    if (h >= blocks_.size() || !blocks_[h].allocated)
      throw InvalidInput("allocator handle", "does not name a live allocation");
    Block& block = blocks_[h];
    allocated_ -= block.size;
    requested_ -= block.requested;
    block.allocated = false;
    block.requested = 0;
    Handle b = h;
    if (const Handle p = blocks_[b].prev; p != null_handle && !blocks_[p].allocated) b = merge(p, b, b);
    if (const Handle n = blocks_[b].next; n != null_handle && !blocks_[n].allocated) b = merge(b, n, b);
    pool_of(blocks_[b]).insert(PoolEntry{blocks_[b].size, blocks_[b].address, b});
  }

  /// Bytes of the live allocations' blocks (what `memory_allocated` reports).
  [[nodiscard]] Bytes allocated() const { return Bytes(allocated_); }
  /// Bytes the live allocations asked for.
  [[nodiscard]] Bytes requested() const { return Bytes(requested_); }
  /// The largest `allocated()` since construction or `reset_peaks()`.
  [[nodiscard]] Bytes peak_allocated() const { return Bytes(peak_allocated_); }
  /// The largest `requested()` since construction or `reset_peaks()`.
  [[nodiscard]] Bytes peak_requested() const { return Bytes(peak_requested_); }
  /// Bytes of the segments held (what `memory_reserved` reports).
  [[nodiscard]] Bytes reserved() const { return Bytes(reserved_); }
  [[nodiscard]] std::size_t segments() const { return segments_; }
  /// The block size that allocation `h` holds (its request rounded, plus any remainder not split off).
  [[nodiscard]] std::uint64_t block_size(Handle h) const { return h == null_handle ? 0 : blocks_.at(h).size; }
  /// The address of the block that allocation `h` holds (its segment's address plus its offset).
  [[nodiscard]] std::uint64_t block_address(Handle h) const { return h == null_handle ? 0 : blocks_.at(h).address; }
  /// Releases every segment that holds no allocation (`torch.cuda.empty_cache`).
  void empty_cache() {
    for (FreePool* pool : {&small_, &large_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        const Block& b = blocks_[it->block];
        if (b.prev == null_handle && b.next == null_handle) {
          if (order_ == AddressOrder::driver) release_range(b.address, b.address + b.size);
          reserved_ -= b.size;
          --segments_;
          spare_.push_back(it->block);
          it = pool->erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  /// Starts the peaks again from the current values (`reset_peak_memory_stats`).
  void reset_peaks() {
    peak_allocated_ = allocated_;
    peak_requested_ = requested_;
  }

 private:
  struct Block {
    std::uint64_t address = 0;
    std::uint64_t size = 0;
    std::uint64_t requested = 0;
    Handle prev = null_handle;
    Handle next = null_handle;
    bool small = false;
    bool allocated = false;
  };
  // A pool of free blocks, ordered by size, then address (c10's BlockComparatorSize).
  struct PoolEntry {
    std::uint64_t size = 0, address = 0;
    Handle block = null_handle;
    friend bool operator<(const PoolEntry& a, const PoolEntry& b) {
      return a.size != b.size ? a.size < b.size : a.address < b.address;
    }
  };
  using FreePool = std::set<PoolEntry>;

  FreePool& pool_of(const Block& b) { return b.small ? small_ : large_; }

  Handle make_block(std::uint64_t address, std::uint64_t size, bool small) {
    Block b;
    b.address = address;
    b.size = size;
    b.small = small;
    if (!spare_.empty()) {
      const Handle h = spare_.back();
      spare_.pop_back();
      blocks_[h] = b;
      return h;
    }
    blocks_.push_back(b);
    return blocks_.size() - 1;
  }

  // Merges two adjacent free blocks of one segment into `left`. The one of them that was already
  // free sits in its pool and leaves it; the block being freed is in no pool yet.
  Handle merge(Handle left, Handle right, Handle freed) {
    Block& l = blocks_[left];
    Block& r = blocks_[right];
    const Block& pooled = left == freed ? r : l;
    pool_of(pooled).erase(PoolEntry{pooled.size, pooled.address, null_handle});
    l.size += r.size;
    l.next = r.next;
    if (r.next != null_handle) blocks_[r.next].prev = left;
    spare_.push_back(right);
    return left;
  }

  // The driver order: the first free range of reserved space that fits, lowest address first;
  // else a new chunk below all reserved space (32 MiB, or the size rounded up to 32 MiB), the
  // segment at its bottom and the rest of the chunk free.
  std::uint64_t driver_place(std::uint64_t seg) {
    for (auto it = holes_.begin(); it != holes_.end(); ++it) {
      if (it->second - it->first < seg) continue;
      const std::uint64_t lo = it->first, hi = it->second;
      holes_.erase(it);
      if (lo + seg < hi) holes_.emplace(lo + seg, hi);
      return lo;
    }
    const std::uint64_t chunk = detail::checked_add(seg, kDriverChunk - 1) / kDriverChunk * kDriverChunk;
    next_address_ = detail::checked_sub(next_address_, chunk);
    if (seg < chunk) holes_.emplace(next_address_ + seg, next_address_ + chunk);
    return next_address_;
  }
  // The scattered order: slot k of 2^22, each 2^40 bytes apart (so no two segments overlap),
  // drawn by splitmix64 from the seed and the count of segments opened; a slot taken before goes
  // to the next free one.
  std::uint64_t scattered_place() {
    std::uint64_t z = seed_ * 0x9E3779B97F4A7C15ULL + (++drawn_) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    if (slots_.size() >= kScatteredSlots)
      throw InvalidInput("segments", "the scattered order places at most 4194304 segments");
    std::uint64_t slot = (z & (kScatteredSlots - 1)) + 1;
    while (!slots_.insert(slot).second) slot = slot % kScatteredSlots + 1;
    return slot << 40;
  }
  static constexpr std::uint64_t kScatteredSlots = 1ULL << 22;
  std::uint64_t seed_ = 0, drawn_ = 0;
  std::set<std::uint64_t> slots_;  // the scattered order's slots taken

  void release_range(std::uint64_t lo, std::uint64_t hi) {
    auto next = holes_.lower_bound(lo);
    if (next != holes_.end() && next->first == hi) {
      hi = next->second;
      next = holes_.erase(next);
    }
    if (next != holes_.begin()) {
      auto prev = std::prev(next);
      if (prev->second == lo) {
        lo = prev->first;
        holes_.erase(prev);
      }
    }
    holes_.emplace(lo, hi);
  }
  static constexpr std::uint64_t kDriverTop = 1ULL << 50;
  static constexpr std::uint64_t kDriverChunk = 32ULL << 20;
  std::map<std::uint64_t, std::uint64_t> holes_;  // free reserved ranges, [first, second)

  std::vector<Block> blocks_;
  std::vector<Handle> spare_;
  FreePool small_, large_;
  AddressOrder order_ = AddressOrder::ascending;
  std::uint64_t next_segment_at_ = 0;  // 0: none placed
  std::uint64_t next_address_ = 1ULL << 32;
  std::uint64_t allocated_ = 0, requested_ = 0, peak_allocated_ = 0, peak_requested_ = 0, reserved_ = 0;
  std::size_t segments_ = 0;
};

}  // namespace vramfit::detail
