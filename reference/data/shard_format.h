// Token shard files: a fixed 64-byte little-endian header, then the token ids.
//
//   offset  size  field
//        0     8  magic "TRIPODTK"
//        8     4  version (1)
//       12     4  token_bytes: 2 when vocab_size <= 65536, else 4
//       16     8  vocab_size
//       24     8  token_count
//       32     8  checksum: XXH64 (seed 0) of the token payload bytes as stored
//       40    24  zero padding
//       64     …  token_count little-endian unsigned ids of token_bytes each
//
// The checksum covers the payload so that a corrupted or half-copied shard is caught when it is
// read rather than silently training on garbage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace tripod::data {

inline constexpr uint32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = 0;
  uint32_t token_bytes = 0;
  uint64_t vocab_size = 0;
  uint64_t token_count = 0;
  uint64_t checksum = 0;
};

// Bytes per stored token for a vocabulary: 2 when every id fits in 16 bits, else 4.
uint32_t shard_token_bytes(uint64_t vocab_size);

// Writes `tokens` (each in [0, vocab_size)) to path + ".tmp" and renames it to `path`, so a crash
// never leaves a partial file under the real name.
void write_shard(const std::filesystem::path& path, std::span<const int32_t> tokens,
                 uint64_t vocab_size);

// Reads and validates the header only (magic, version, token width).
ShardHeader read_shard_header(const std::filesystem::path& path);

// Reads a whole shard and verifies size, checksum and that every token is below vocab_size.
std::vector<int32_t> read_shard(const std::filesystem::path& path, ShardHeader* header = nullptr);

// The same validation of a whole shard's bytes already in memory, named `origin` in errors (the
// fuzz suite's entry point).
std::vector<int32_t> parse_shard(std::span<const std::byte> bytes, const std::filesystem::path& origin,
                                 ShardHeader* header = nullptr);

}  // namespace tripod::data
