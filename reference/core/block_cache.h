// Large host blocks (the CPU backends' tensors, core/host_memory.h's): mapped from the kernel, kept
// for reuse, and never more of them held than the most ever in use at once.
//
// Why not malloc: glibc serves a multi-MiB block from its heap once a block of that size has been
// freed (its mmap threshold rises to the largest freed mapping, up to 32 MiB), and freed heap
// memory goes back to the kernel only from the heap's top. So activations, gradient-bucket buffers
// and ZeRO-3's gathered buckets, freed in one order and allocated again in another, left the process
// holding far more than it used: ZeRO-3 on GPT-2 124M, 4 ranks, measured 1242-1542 MiB of resident
// memory for 910 MiB in use (README: Memory that is really returned). Mapping and unmapping every
// block returned it all but made a `small` step 8-15 % slower in page faults.
//
// The rule here: a freed block is kept, by size, for the next request of exactly that size (a
// training step asks for the same sizes every step, so steady state maps nothing); a request that
// finds none maps a new block, after unmapping kept blocks (oldest first) until
//   held + kept + new <= max(peak in use, in use + new),
// so the process never holds more than its allocator high-water mark in these blocks. Sizes are
// whole pages; blocks are 64-byte aligned (page-aligned) and zero-filled like any allocation.
#pragma once
#include <cstddef>
#include <list>
#include <map>
#include <mutex>

namespace tripod {

class BlockCache {
 public:
  BlockCache() = default;
  ~BlockCache();  // unmaps what is kept (blocks in use belong to their tensors)
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  static std::size_t rounded(std::size_t bytes);  // to whole pages

  // Zero-filled unless `zero_fill` is false (a reused block then keeps its old bytes: for a caller
  // that overwrites all of it); null when the kernel refuses.
  void* allocate(std::size_t bytes, bool zero_fill = true);
  void release(void* block, std::size_t bytes);
  void trim();  // unmaps every kept block (and forgets the peak in use): for a measurement's start

  struct Stats {
    std::size_t in_use = 0, kept = 0, peak_in_use = 0, peak_held = 0;  // held = in use + kept
    std::size_t maps = 0, reuses = 0;
  };
  Stats stats() const;

 private:
  struct Kept {
    void* block;
    std::size_t bytes;
  };
  void unmap_oldest();

  mutable std::mutex mutex_;  // tensors may die on another thread (a checkpoint's writer)
  std::list<Kept> kept_;      // oldest first
  std::multimap<std::size_t, std::list<Kept>::iterator> by_size_;
  Stats stats_;
};

// The process's cache for host tensors of at least kCachedBlockMinBytes (smaller ones stay with
// malloc, which keeps small sizes well). It is never destroyed: tensors may outlive any backend.
constexpr std::size_t kCachedBlockMinBytes = std::size_t{1} << 20;
BlockCache& host_block_cache();

// A zero-filled (unless `zero_fill` is false), 64-byte-aligned host block of `bytes` (a multiple of
// 64): from the cache when large, else from malloc; null when out of memory. Free it with the same
// size.
void* allocate_host_block(std::size_t bytes, bool zero_fill = true);
void free_host_block(void* block, std::size_t bytes);

}  // namespace tripod
