#pragma once
/// @file allocator.hpp
/// `CachingAllocatorModel`: the block logic of c10's CUDA caching allocator (512 B rounding, small
/// and large pools, best fit, split and merge rules), replayed on a sequence of requests to give
/// the allocated bytes `torch.cuda.max_memory_allocated` reports. With the recorded segment
/// addresses it reproduces the H200 traces in tests/data/traces/ to the byte. Rules, sources and
/// the placement orders: tests/validation/README.md#allocator-model
///
/// Under a limit (`configure`), a request no cached block serves follows c10's
/// DeviceCachingAllocator::malloc: get_free_block, garbage_collect_cached_blocks, alloc_block (the
/// memory fraction's check), release_available_cached_blocks, release_cached_blocks, else out of
/// memory. `AllocConf` adds expandable segments and max_split_size_mb. Why: tests/validation/
/// README.md#fit-decisions-under-a-budget

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "vramfit/alloc_conf.hpp"
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

  /// Starts again as `CachingAllocatorModel(order, headroom)`, keeping the storage of its blocks
  /// and pools (a simulation runs many placements).
  void reset(AddressOrder order, std::uint64_t headroom = 0) {
    std::vector<Block> blocks = std::move(blocks_);
    std::vector<Handle> spare = std::move(spare_);
    FreePool small = std::move(small_), large = std::move(large_);
    blocks.clear();
    spare.clear();
    small.clear();
    large.clear();
    *this = CachingAllocatorModel(order, headroom);
    blocks_ = std::move(blocks);
    spare_ = std::move(spare);
    small_ = std::move(small);
    large_ = std::move(large);
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

  /// What PyTorch's out-of-memory message reports, at the request that failed.
  struct OutOfMemory {
    std::uint64_t requested = 0;          ///< the request, rounded to 512 B
    std::uint64_t tried_to_allocate = 0;  ///< the segment asked for ("Tried to allocate", c10's alloc_size)
    std::uint64_t allocated = 0;          ///< "allocated by PyTorch"
    std::uint64_t reserved = 0;           ///< segments held once the caches were released
    std::uint64_t limit = 0;              ///< "allowed" (allowed_memory_maximum)
  };
  /// `malloc`'s answer when the request does not fit under the limit (`oom()` says why).
  static constexpr Handle oom_handle = static_cast<Handle>(-2);

  /// Sets the limit (bytes the allocator may reserve; none: no limit) and the settings. Before the
  /// first request only.
  void configure(std::optional<std::uint64_t> limit, const AllocConf& conf) {
    if (!blocks_.empty()) throw InvalidInput("allocator", "configure before the first request");
    limit_ = limit;
    conf_ = conf;
    max_split_ = conf.max_split_size.value_or(std::numeric_limits<std::uint64_t>::max());
    gc_ = limit.has_value() && conf.garbage_collection_threshold.has_value();
    limited_ = limit.has_value() || conf != AllocConf{};
  }
  /// How often a new segment was refused by the limit (each followed by a release of cached
  /// blocks, or by out of memory); 0: the run never reached the limit.
  [[nodiscard]] std::size_t limit_refusals() const { return limit_refusals_; }
  /// The failed request's figures after `malloc` answered `oom_handle`.
  [[nodiscard]] const std::optional<OutOfMemory>& oom() const { return oom_; }

  /// Serves a request of `bytes`; returns the handle to free it with, or `oom_handle` under a limit.
  Handle malloc(std::uint64_t bytes) {
    if (bytes == 0) return null_handle;
    const std::uint64_t size = round_size(bytes);
    const bool small = size <= kSmallSize;
    if (limited_) return malloc_limited(bytes, size, small);
    auto& pool = small ? small_ : large_;
    Handle b;
    if (auto it = pool.lower_bound(PoolEntry{size, 0, 0}); it != pool.end()) {
      b = it->block;
      pool.erase(it);
    } else {
      b = open_segment(segment_size(size), small);
    }
    const std::uint64_t rest = blocks_[b].size - size;
    return hand_out(b, size, bytes, small, small ? rest >= kMinBlockSize : rest > kSmallSize);
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
    if (const Handle p = blocks_[b].prev; p != null_handle && free_mapped(p)) b = merge(p, b, b);
    if (const Handle n = blocks_[b].next; n != null_handle && free_mapped(n)) b = merge(b, n, b);
    pool_insert(b);
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
  /// The largest `reserved()` since construction or `reset_peaks()`.
  [[nodiscard]] Bytes peak_reserved() const { return Bytes(peak_reserved_); }
  [[nodiscard]] std::size_t segments() const { return segments_; }
  /// The block size that allocation `h` holds (its request rounded, plus any remainder not split off).
  [[nodiscard]] std::uint64_t block_size(Handle h) const { return h == null_handle ? 0 : blocks_.at(h).size; }
  /// The bytes allocation `h` asked for.
  [[nodiscard]] std::uint64_t requested_size(Handle h) const { return h == null_handle ? 0 : blocks_.at(h).requested; }
  /// The address of the block that allocation `h` holds (its segment's address plus its offset).
  [[nodiscard]] std::uint64_t block_address(Handle h) const { return h == null_handle ? 0 : blocks_.at(h).address; }
  /// Releases every segment that holds no allocation, and with expandable segments unmaps every
  /// free page (`torch.cuda.empty_cache`; c10's release_cached_blocks / release_blocks).
  void empty_cache() {
    std::vector<Handle> to_unmap;
    for (FreePool* pool : {&small_, &large_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        const Block& b = blocks_[it->block];
        if (b.expandable) {
          to_unmap.push_back(it->block);
          ++it;
        } else if (b.prev == null_handle && b.next == null_handle) {
          it = release_free_segment(*pool, it);
        } else {
          ++it;
        }
      }
    }
    for (const Handle h : to_unmap) unmap_block(h);
  }
  /// Starts the peaks again from the current values (`reset_peak_memory_stats`).
  void reset_peaks() {
    peak_allocated_ = allocated_;
    peak_requested_ = requested_;
    peak_reserved_ = reserved_;
  }

 private:
  struct Block {
    std::uint64_t address = 0;
    std::uint64_t size = 0;
    std::uint64_t requested = 0;
    Handle prev = null_handle;
    Handle next = null_handle;
    std::uint64_t gc_base = 0;  // the pool's get_free_block count when it entered the pool
    bool small = false;
    bool allocated = false;
    bool mapped = true;         // false: expandable address space with no pages behind it
    bool expandable = false;
  };
  // A pool of free blocks, ordered by size, then address (c10's BlockComparatorSize).
  struct PoolEntry {
    std::uint64_t size = 0, address = 0;
    Handle block = null_handle;
    friend bool operator<(const PoolEntry& a, const PoolEntry& b) {
      return a.size != b.size ? a.size < b.size : a.address < b.address;
    }
  };
  // The pool as c10's std::set orders it, stored as sorted buckets of sizes within 1/16 of a power
  // of two, with a bitmap of the non-empty ones: best fit in a few steps, no node per block. The
  // subset of std::set's interface the model uses; erasing invalidates only iterators at and after
  // the erased entry's bucket position.
  class FreePool {
   public:
    static constexpr std::uint32_t kClasses = 1024;  // 16 per power of two, sizes below 2^64
    class iterator {
     public:
      using iterator_category = std::bidirectional_iterator_tag;
      using value_type = PoolEntry;
      using difference_type = std::ptrdiff_t;
      using pointer = const PoolEntry*;
      using reference = const PoolEntry&;
      iterator() = default;
      reference operator*() const { return pool_->buckets_[cls_][idx_]; }
      pointer operator->() const { return &pool_->buckets_[cls_][idx_]; }
      iterator& operator++() {
        if (++idx_ >= pool_->buckets_[cls_].size()) {
          cls_ = pool_->next_class(cls_ + 1);
          idx_ = 0;
        }
        return *this;
      }
      iterator operator++(int) {
        iterator old = *this;
        ++*this;
        return old;
      }
      iterator& operator--() {
        if (idx_ == 0) {
          cls_ = pool_->prev_class(cls_);
          idx_ = static_cast<std::uint32_t>(pool_->buckets_[cls_].size());
        }
        --idx_;
        return *this;
      }
      friend bool operator==(const iterator& a, const iterator& b) { return a.cls_ == b.cls_ && a.idx_ == b.idx_; }

     private:
      friend class FreePool;
      iterator(const FreePool* pool, std::uint32_t cls, std::uint32_t idx) : pool_(pool), cls_(cls), idx_(idx) {}
      const FreePool* pool_ = nullptr;
      std::uint32_t cls_ = kClasses, idx_ = 0;
    };

    iterator begin() const { return {this, next_class(0), 0}; }
    iterator end() const { return {this, kClasses, 0}; }
    /// The first entry not below `key` (by size, then address).
    iterator lower_bound(const PoolEntry& key) const {
      const std::uint32_t c = size_class(key.size);
      const auto& b = buckets_[c];
      const auto it = std::lower_bound(b.begin(), b.end(), key);
      if (it != b.end()) return {this, c, static_cast<std::uint32_t>(it - b.begin())};
      return {this, next_class(c + 1), 0};
    }
    void insert(const PoolEntry& e) {
      const std::uint32_t c = size_class(e.size);
      auto& b = buckets_[c];
      b.insert(std::upper_bound(b.begin(), b.end(), e), e);
      bits_[c / 64] |= 1ULL << (c % 64);
      ++size_;
    }
    /// Erases the entry `it` names; returns the one after it.
    iterator erase(iterator it) {
      auto& b = buckets_[it.cls_];
      b.erase(b.begin() + it.idx_);
      --size_;
      if (b.empty()) bits_[it.cls_ / 64] &= ~(1ULL << (it.cls_ % 64));
      if (it.idx_ < b.size()) return it;
      return {this, next_class(it.cls_ + 1), 0};
    }
    /// Erases the entry of `key`'s size and address, if there is one.
    void erase(const PoolEntry& key) {
      const auto it = lower_bound(key);
      if (it != end() && it->size == key.size && it->address == key.address) erase(it);
    }
    [[nodiscard]] std::size_t size() const { return size_; }
    /// Empties the pool, keeping its buckets' storage.
    void clear() {
      for (std::uint32_t c = next_class(0); c < kClasses; c = next_class(c + 1)) buckets_[c].clear();
      bits_.fill(0);
      size_ = 0;
    }

   private:
    static std::uint32_t size_class(std::uint64_t size) {
      if (size < 16) return static_cast<std::uint32_t>(size);
      const auto log = static_cast<std::uint32_t>(63 - std::countl_zero(size));
      return log * 16 + static_cast<std::uint32_t>((size >> (log - 4)) & 15);
    }
    // The first non-empty class at or after `c` (kClasses: none).
    std::uint32_t next_class(std::uint32_t c) const {
      for (std::uint32_t w = c / 64; w < kClasses / 64; ++w) {
        std::uint64_t bits = bits_[w];
        if (w == c / 64) bits &= ~0ULL << (c % 64);
        if (bits != 0) return w * 64 + static_cast<std::uint32_t>(std::countr_zero(bits));
      }
      return kClasses;
    }
    // The last non-empty class before `c` (there must be one).
    std::uint32_t prev_class(std::uint32_t c) const {
      for (std::uint32_t w = (c - 1) / 64 + 1; w-- > 0;) {
        std::uint64_t bits = bits_[w];
        if (w == (c - 1) / 64 && (c - 1) % 64 != 63) bits &= (2ULL << ((c - 1) % 64)) - 1;
        if (bits != 0) return w * 64 + static_cast<std::uint32_t>(63 - std::countl_zero(bits));
      }
      return kClasses;
    }
    std::array<std::vector<PoolEntry>, kClasses> buckets_{};
    std::array<std::uint64_t, kClasses / 64> bits_{};
    std::size_t size_ = 0;
  };

 private:
  FreePool& pool_of(const Block& b) { return b.small ? small_ : large_; }
  bool free_mapped(Handle h) const { return !blocks_[h].allocated && blocks_[h].mapped; }
  // c10's BlockPool::insert_into_blocks: the block's age for garbage collection starts now.
  void pool_insert(Handle h) {
    Block& b = blocks_[h];
    if (gc_) b.gc_base = gc_calls_[b.small ? 1 : 0];
    pool_of(b).insert(PoolEntry{b.size, b.address, h});
  }
  void grow_reserved(std::uint64_t n) {
    reserved_ = detail::checked_add(reserved_, n);
    if (reserved_ > peak_reserved_) peak_reserved_ = reserved_;
  }

  // A new segment of `seg` bytes at the order's next address (cudaMalloc in alloc_block).
  Handle open_segment(std::uint64_t seg, bool small) {
    Handle b;
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
    grow_reserved(seg);
    ++segments_;
    return b;
  }

  // c10's alloc_found_block: splits off the rest when `split`, marks the block allocated.
  Handle hand_out(Handle b, std::uint64_t size, std::uint64_t bytes, bool small, bool split) {
    if (split) {
      const Handle r = make_block(blocks_[b].address + size, blocks_[b].size - size, small);  // may reallocate blocks_
      Block& head = blocks_[b];
      Block& tail = blocks_[r];
      tail.prev = b;
      tail.next = head.next;
      tail.expandable = head.expandable;
      if (head.next != null_handle) blocks_[head.next].prev = r;
      head.next = r;
      head.size = size;
      pool_insert(r);
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

  // c10's DeviceCachingAllocator::malloc under a limit or non-default settings.
  Handle malloc_limited(std::uint64_t bytes, std::uint64_t size, bool small) {
    Handle b = get_free_block(size, small);
    if (b == null_handle) {
      if (gc_) garbage_collect_cached_blocks();
      const std::uint64_t seg = segment_size(size);  // c10's get_allocation_size
      b = alloc_block(seg, size, small);
      if (b == null_handle && release_available_cached_blocks(size, small)) b = alloc_block(seg, size, small);
      if (b == null_handle) {
        empty_cache();  // release_cached_blocks
        b = alloc_block(seg, size, small);
      }
      if (b == null_handle) {
        oom_ = OutOfMemory{.requested = size, .tried_to_allocate = seg, .allocated = allocated_,
                           .reserved = reserved_, .limit = limit_.value_or(0)};
        return oom_handle;
      }
    }
    // c10's should_split
    const std::uint64_t rest = blocks_[b].size - size;
    const bool split = small || conf_.expandable_segments ? rest >= kMinBlockSize
                                                          : size < max_split_ && rest > kSmallSize;
    return hand_out(b, size, bytes, small, split);
  }

  // c10's get_free_block: best fit; with expandable segments a block counts as large as it can
  // grow into the unmapped space after it; a block of max_split_size or more serves no smaller
  // request, and a larger request only within kLargeBuffer of its size.
  Handle get_free_block(std::uint64_t size, bool small) {
    FreePool& pool = small ? small_ : large_;
    if (gc_) ++gc_calls_[small ? 1 : 0];
    auto it = pool.lower_bound(PoolEntry{size, 0, 0});
    if (it == pool.end()) return null_handle;
    if (blocks_[it->block].expandable) {
      const auto expandable_size = [&](const PoolEntry& e) {
        const Block& b = blocks_[e.block];
        return b.size + (b.next != null_handle && !blocks_[b.next].mapped ? blocks_[b.next].size : 0);
      };
      for (auto next = std::next(it); next != pool.end() && expandable_size(*next) < expandable_size(*it); ++next)
        it = next;
    }
    if (size < max_split_ && it->size >= max_split_) return null_handle;
    if (size >= max_split_ && it->size >= detail::checked_add(size, kLargeBuffer)) return null_handle;
    const Handle b = it->block;
    pool.erase(it);
    return b;
  }

  // c10's alloc_block: refused when the segment would take the reserved bytes past the limit
  // (total_allocated_memory + size > allowed_memory_maximum), else a new segment or, with
  // expandable segments, pages mapped (try_allocate_expandable_block).
  Handle alloc_block(std::uint64_t seg, std::uint64_t size, bool small) {
    if (limit_ && detail::checked_add(reserved_, seg) > *limit_) {
      ++limit_refusals_;
      return null_handle;
    }
    if (conf_.expandable_segments) return try_allocate_expandable_block(size, small);
    return open_segment(seg, small);
  }

  // Releases the free block `it` points at, a whole segment (cudaFree in c10's release_block).
  FreePool::iterator release_free_segment(FreePool& pool, FreePool::iterator it) {
    const Block& b = blocks_[it->block];
    if (order_ == AddressOrder::driver) release_range(b.address, b.address + b.size);
    reserved_ -= b.size;
    --segments_;
    spare_.push_back(it->block);
    return pool.erase(it);
  }

  // c10's release_available_cached_blocks: with max_split_size set, frees the smallest cached
  // oversize segment that covers the request, else oversize ones largest first until their bytes
  // cover it.
  bool release_available_cached_blocks(std::uint64_t size, bool small) {
    if (max_split_ == std::numeric_limits<std::uint64_t>::max()) return false;
    FreePool& pool = small ? small_ : large_;
    const std::uint64_t key = std::max(size, max_split_);
    const auto whole = [&](FreePool::iterator i) {
      const Block& b = blocks_[i->block];
      return !b.expandable && b.prev == null_handle && b.next == null_handle;
    };
    auto it = pool.lower_bound(PoolEntry{key, 0, 0});
    if (it != pool.end() && !blocks_[it->block].expandable) {
      if (!whole(it)) return false;  // an oversize block is never split (should_split)
      release_free_segment(pool, it);
      return true;
    }
    if (it == pool.begin()) return false;
    --it;
    std::uint64_t released = 0;
    while (released < key && it->size >= max_split_) {
      const auto cur = it;
      const bool first = cur == pool.begin();
      if (!first) --it;
      if (whole(cur)) {
        released += cur->size;
        release_free_segment(pool, cur);
      }
      if (first) break;
    }
    return released >= key;
  }

  // c10's garbage_collect_cached_blocks: once reserved passes threshold x limit, frees unsplit
  // cached large segments at least as old (get_free_block calls since cached) as the average,
  // until the excess is reclaimed.
  void garbage_collect_cached_blocks() {
    const auto threshold =
        static_cast<std::uint64_t>(*conf_.garbage_collection_threshold * static_cast<double>(*limit_));
    if (reserved_ <= threshold) return;
    const std::uint64_t target = reserved_ - threshold;
    const auto freeable = [&](const PoolEntry& e) {
      const Block& b = blocks_[e.block];
      return !b.expandable && b.prev == null_handle && b.next == null_handle;
    };
    const auto age = [&](const PoolEntry& e) { return gc_calls_[0] - blocks_[e.block].gc_base; };
    std::uint64_t total_age = 0, count = 0, reclaimed = 0;
    for (const PoolEntry& e : large_)
      if (freeable(e)) total_age += age(e), ++count;
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
      const double threshold_age = static_cast<double>(total_age) / static_cast<double>(count);
      freed = false;
      for (auto it = large_.begin(); it != large_.end();) {
        if (freeable(*it) && static_cast<double>(age(*it)) >= threshold_age) {
          freed = true;
          reclaimed += it->size;
          total_age -= age(*it);
          --count;
          it = release_free_segment(large_, it);
        } else {
          ++it;
        }
      }
    }
  }

  // Expandable segments (c10's ExpandableSegment): one address range per pool, mapped in pages
  // of kSmallBuffer (small pool) or kLargeBuffer (large pool).
  static constexpr std::uint64_t kExpandableSpace = 1ULL << 48;
  static constexpr std::uint64_t page_of(bool small) { return small ? kSmallBuffer : kLargeBuffer; }
  std::uint64_t expandable_base(bool small) const { return small ? (1ULL << 58) : (1ULL << 59); }

  // c10's find_expandable_block: the lowest unmapped range (with the free block before it) whose
  // run of unallocated blocks holds `size`; the segment is created on first use.
  Handle find_expandable_block(std::uint64_t size, bool small) {
    auto& unmapped = unmapped_[small ? 1 : 0];
    if (!expandable_made_[small ? 1 : 0]) {
      expandable_made_[small ? 1 : 0] = true;
      const Handle h = make_block(expandable_base(small), kExpandableSpace, small);
      blocks_[h].mapped = false;
      blocks_[h].expandable = true;
      unmapped.emplace(blocks_[h].address, h);
      ++segments_;
    }
    for (const auto& [address, u] : unmapped) {
      Handle c = u;
      if (const Handle p = blocks_[c].prev; p != null_handle && !blocks_[p].allocated) c = p;
      std::uint64_t room = 0;
      for (Handle x = c; room < size && x != null_handle && !blocks_[x].allocated; x = blocks_[x].next)
        room += blocks_[x].size;
      if (room >= size) return c;
    }
    throw InvalidInput("request", "larger than the expandable segment's address space (256 TiB)");
  }

  // c10's map_block: maps the pages under the first `size` bytes of unmapped `h`, then merges it
  // with free mapped neighbours; returns the merged free block (in its pool).
  Handle map_block(Handle h, std::uint64_t size) {
    const bool small = blocks_[h].small;
    const std::uint64_t page = page_of(small), base = expandable_base(small);
    unmapped_[small ? 1 : 0].erase(blocks_[h].address);
    const std::uint64_t end = (blocks_[h].address - base + size + page - 1) / page * page + base;
    const std::uint64_t mapped = end - blocks_[h].address;
    blocks_[h].mapped = true;
    if (mapped < blocks_[h].size) {
      const Handle r = make_block(end, blocks_[h].size - mapped, small);  // may reallocate blocks_
      Block& b = blocks_[h];
      Block& rest = blocks_[r];
      rest.mapped = false;
      rest.expandable = true;
      rest.prev = h;
      rest.next = b.next;
      if (b.next != null_handle) blocks_[b.next].prev = r;
      b.next = r;
      b.size = mapped;
      unmapped_[small ? 1 : 0].emplace(end, r);
    }
    Handle b = h;
    if (const Handle p = blocks_[b].prev; p != null_handle && free_mapped(p)) b = merge(p, b, b);
    if (const Handle n = blocks_[b].next; n != null_handle && free_mapped(n)) b = merge(b, n, b);
    pool_insert(b);
    grow_reserved(mapped);
    return b;
  }

  // c10's try_allocate_expandable_block: maps pages after the candidate until it holds `size`.
  Handle try_allocate_expandable_block(std::uint64_t size, bool small) {
    Handle c = find_expandable_block(size, small);
    if (!blocks_[c].mapped) c = map_block(c, std::min(blocks_[c].size, size));
    while (blocks_[c].size < size) {
      const Handle n = blocks_[c].next;
      c = map_block(n, std::min(size - blocks_[c].size, blocks_[n].size));
    }
    pool_of(blocks_[c]).erase(PoolEntry{blocks_[c].size, blocks_[c].address, c});
    return c;
  }

  // c10's unmap_block: unmaps the whole pages inside free block `h`; the parts before and after
  // stay free and mapped, the unmapped part joins unmapped neighbours.
  void unmap_block(Handle h) {
    const bool small = blocks_[h].small;
    const std::uint64_t page = page_of(small), base = expandable_base(small);
    const std::uint64_t lo0 = blocks_[h].address, hi0 = lo0 + blocks_[h].size;
    const std::uint64_t lo = (lo0 - base + page - 1) / page * page + base, hi = (hi0 - base) / page * page + base;
    if (lo >= hi) return;
    pool_of(blocks_[h]).erase(PoolEntry{blocks_[h].size, lo0, h});
    const auto splice_free = [&](std::uint64_t address, std::uint64_t n, bool before) {
      const Handle f = make_block(address, n, small);  // may reallocate blocks_
      Block& fb = blocks_[f];
      Block& b = blocks_[h];
      fb.expandable = true;
      if (before) {
        fb.prev = b.prev;
        fb.next = h;
        if (b.prev != null_handle) blocks_[b.prev].next = f;
        b.prev = f;
      } else {
        fb.prev = h;
        fb.next = b.next;
        if (b.next != null_handle) blocks_[b.next].prev = f;
        b.next = f;
      }
      pool_insert(f);
    };
    if (lo > lo0) splice_free(lo0, lo - lo0, true);
    if (hi < hi0) splice_free(hi, hi0 - hi, false);
    blocks_[h].address = lo;
    blocks_[h].size = hi - lo;
    blocks_[h].mapped = false;
    auto& unmapped = unmapped_[small ? 1 : 0];
    Handle b = h;
    if (const Handle p = blocks_[b].prev; p != null_handle && !blocks_[p].mapped) {
      unmapped.erase(blocks_[p].address);
      b = join(p, b);
    }
    if (const Handle n = blocks_[b].next; n != null_handle && !blocks_[n].mapped) {
      unmapped.erase(blocks_[n].address);
      b = join(b, n);
    }
    unmapped.emplace(blocks_[b].address, b);
    reserved_ -= hi - lo;
  }
  // Joins two adjacent blocks into `left` (neither in a pool).
  Handle join(Handle left, Handle right) {
    Block& l = blocks_[left];
    const Block& r = blocks_[right];
    l.size += r.size;
    l.next = r.next;
    if (r.next != null_handle) blocks_[r.next].prev = left;
    spare_.push_back(right);
    return left;
  }

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
  std::uint64_t peak_reserved_ = 0;
  std::size_t segments_ = 0;
  // Under a limit or settings (`configure`); the plain path reads only `limited_`.
  bool limited_ = false, gc_ = false;
  std::optional<std::uint64_t> limit_;
  AllocConf conf_;
  std::uint64_t max_split_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t gc_calls_[2] = {0, 0};        // get_free_block calls per pool (large, small)
  bool expandable_made_[2] = {false, false};  // the expandable segment of each pool exists
  std::map<std::uint64_t, Handle> unmapped_[2];  // unmapped ranges by address (pool.unmapped)
  std::optional<OutOfMemory> oom_;
  std::size_t limit_refusals_ = 0;
};

}  // namespace vramfit::detail
