// One rank's shard file of a sharded checkpoint:
//
//   offset  size  field
//        0     8  magic "TRIPODCK"
//        8     4  format version (2, as the manifest's)
//       12     4  rank that wrote it
//       16     8  step
//       24    40  zero
//       64     …  blocks, back to back, each the saved elements of one state region's runs in
//                 its dtype, little-endian (where they are and what they hold: ckpt/manifest.h)
//
// The header lets a reader tell a shard of another rank or step from the right one; the manifest's
// checksums (per file and per block) catch everything else.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "core/digest.h"
#include "core/state_region.h"

namespace tripod::ckpt {

inline constexpr std::size_t kShardHeaderBytes = 64;

// "shard-00003.bin"
std::string shard_file_name(int rank);

// The strided blocks that hold `runs` (in local order), greedily: runs of equal length at a constant
// logical stride share a block. For tests and for the writer.
std::vector<Block> blocks_of_runs(const std::vector<LogicalRun>& runs);

class ShardWriter {
 public:
  // Creates dir/shard_file_name(rank) under a temporary name.
  ShardWriter(const std::filesystem::path& dir, int rank, int64_t step);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends the region's runs; `host` holds region.local's bytes. Throws, naming the tensor, where
  // a run holds an infinite or NaN value (ckpt/finite_values.h), before writing any of them.
  void add(const StateRegion& region, const std::byte* host);
  // fsync, rename into place; the file's manifest entry.
  ShardFile finish();

 private:
  void check_finite(const StateRegion& region, const std::byte* host) const;

  std::filesystem::path path_, tmp_;
  int64_t step_ = 0;
  int fd_ = -1;
  Xxh64 hash_;  // of the whole file
  ShardFile entry_;
  uint64_t written_ = 0;
};

// Checks a shard file's header against its manifest entry (magic, version, rank, step, size);
// throws naming the file.
void check_shard_header(int fd, const std::filesystem::path& path, const ShardFile& entry, int64_t step);

}  // namespace tripod::ckpt
