// The CPU backends' cache of large blocks (core/block_cache.h): reuse by size, zero-filled
// blocks (unless the caller overwrites them all), and never more held than the peak in use.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/block_cache.h"

namespace tripod {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(BlockCache, AFreedBlockServesTheNextRequestOfItsSizeZeroFilled) {
  BlockCache cache;
  auto* a = static_cast<unsigned char*>(cache.allocate(2 * kMiB));
  ASSERT_NE(a, nullptr);
  std::memset(a, 0xAB, 2 * kMiB);
  cache.release(a, 2 * kMiB);
  auto* b = static_cast<unsigned char*>(cache.allocate(2 * kMiB));
  EXPECT_EQ(b, a);
  std::vector<unsigned char> zeros(2 * kMiB, 0);
  EXPECT_EQ(std::memcmp(b, zeros.data(), zeros.size()), 0);
  EXPECT_EQ(cache.stats().maps, 1u);
  EXPECT_EQ(cache.stats().reuses, 1u);
  cache.release(b, 2 * kMiB);
}

// For a caller that overwrites the whole block (the CPU backends' alloc_for_overwrite: operand
// copies), the fill is skipped: a reused block keeps its bytes, a fresh mapping is zero anyway.
TEST(BlockCache, ABlockForOverwriteSkipsTheFill) {
  BlockCache cache;
  auto* a = static_cast<unsigned char*>(cache.allocate(2 * kMiB, /*zero_fill=*/false));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a[0], 0);
  EXPECT_EQ(a[2 * kMiB - 1], 0);
  std::memset(a, 0xAB, 2 * kMiB);
  cache.release(a, 2 * kMiB);
  auto* b = static_cast<unsigned char*>(cache.allocate(2 * kMiB, false));
  EXPECT_EQ(b, a);
  EXPECT_EQ(b[0], 0xAB);
  EXPECT_EQ(b[2 * kMiB - 1], 0xAB);
  cache.release(b, 2 * kMiB);
  // the same block asked for as usual is zero-filled again
  auto* c = static_cast<unsigned char*>(cache.allocate(2 * kMiB));
  EXPECT_EQ(c, a);
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[2 * kMiB - 1], 0);
  cache.release(c, 2 * kMiB);
}

TEST(BlockCache, KeptBlocksAreUnmappedRatherThanHoldMoreThanThePeak) {
  BlockCache cache;
  void* big = cache.allocate(4 * kMiB);
  cache.release(big, 4 * kMiB);
  // 4 MiB kept + 2 MiB new would be 6 MiB held against a peak of 4: the kept block goes first.
  void* small = cache.allocate(2 * kMiB);
  EXPECT_EQ(cache.stats().kept, 0u);
  EXPECT_EQ(cache.stats().peak_held, 4 * kMiB);
  // Two small ones fit under the peak with nothing kept.
  void* second = cache.allocate(2 * kMiB);
  EXPECT_EQ(cache.stats().peak_held, 4 * kMiB);
  cache.release(small, 2 * kMiB);
  cache.release(second, 2 * kMiB);
}

TEST(BlockCache, HeldNeverExceedsThePeakInUseOverARandomWorkload) {
  BlockCache cache;
  std::mt19937 random(7);
  std::vector<std::pair<void*, std::size_t>> live;
  const std::size_t sizes[] = {1 * kMiB, 1 * kMiB + 4096, 3 * kMiB, 5 * kMiB + 100};
  for (int i = 0; i < 400; ++i) {
    if (!live.empty() && random() % 2 == 0) {
      const std::size_t j = random() % live.size();
      cache.release(live[j].first, live[j].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(j));
    } else {
      const std::size_t bytes = sizes[random() % 4];
      live.emplace_back(cache.allocate(bytes), bytes);
      ASSERT_NE(live.back().first, nullptr);
    }
    const BlockCache::Stats s = cache.stats();
    ASSERT_LE(s.in_use + s.kept, s.peak_in_use) << "after operation " << i;
    ASSERT_LE(s.peak_held, s.peak_in_use);
  }
  EXPECT_GT(cache.stats().reuses, 0u);
  for (auto& [block, bytes] : live) cache.release(block, bytes);
  EXPECT_EQ(cache.stats().in_use, 0u);
}

TEST(BlockCache, TrimReturnsWhatIsKept) {
  BlockCache cache;
  void* a = cache.allocate(2 * kMiB);
  void* b = cache.allocate(3 * kMiB);
  cache.release(b, 3 * kMiB);
  cache.trim();
  EXPECT_EQ(cache.stats().kept, 0u);
  EXPECT_EQ(cache.stats().peak_in_use, 2 * kMiB);  // a new peak starts from what is in use
  cache.release(a, 2 * kMiB);
}

TEST(BlockCache, SizesAreWholePages) {
  EXPECT_EQ(BlockCache::rounded(1), BlockCache::rounded(4096));
  EXPECT_EQ(BlockCache::rounded(kMiB) % 4096, 0u);
}

}  // namespace
}  // namespace tripod
