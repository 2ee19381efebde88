#include "ckpt/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "ckpt/durable_file.h"
#include "ckpt/finite_values.h"
#include "core/error.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'R', 'I', 'P', 'O', 'D', 'C', 'K'};

std::array<std::byte, kShardHeaderBytes> header_bytes(int rank, int64_t step) {
  std::array<std::byte, kShardHeaderBytes> h{};
  const uint32_t version = kManifestVersion, r = static_cast<uint32_t>(rank);
  const uint64_t s = static_cast<uint64_t>(step);
  std::memcpy(h.data(), kMagic, 8);
  std::memcpy(h.data() + 8, &version, 4);
  std::memcpy(h.data() + 12, &r, 4);
  std::memcpy(h.data() + 16, &s, 8);
  return h;
}

}  // namespace

std::string shard_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05d.bin", rank);
  return name;
}

std::vector<Block> blocks_of_runs(const std::vector<LogicalRun>& runs) {
  std::vector<Block> blocks;
  for (const LogicalRun& r : runs) {
    if (r.length <= 0) continue;
    if (!blocks.empty()) {
      Block& b = blocks.back();
      const int64_t next = b.count == 1 ? r.logical - b.start : b.stride;  // the stride this run would need
      if (r.length == b.length && next >= b.length && r.logical == b.start + b.count * next) {
        b.stride = next;
        ++b.count;
        continue;
      }
    }
    Block b;
    b.start = r.logical;
    b.length = r.length;
    b.count = 1;
    b.stride = r.length;
    blocks.push_back(b);
  }
  return blocks;
}

ShardWriter::ShardWriter(const fs::path& dir, int rank, int64_t step)
    : path_(dir / shard_file_name(rank)), tmp_(path_.string() + ".tmp"), step_(step) {
  entry_.name = shard_file_name(rank);
  entry_.rank = rank;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd_ >= 0, "cannot create checkpoint shard ", tmp_.string(), ": ", last_system_error());
  const auto header = header_bytes(rank, step);
  write_fully(fd_, header.data(), header.size(), tmp_);
  hash_.update(header.data(), header.size());
  written_ = header.size();
}

ShardWriter::~ShardWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  std::error_code ignored;
  fs::remove(tmp_, ignored);  // not finished: leave nothing half-written behind
}

void ShardWriter::add(const StateRegion& region, const std::byte* host) {
  const std::size_t element = dtype_size(region.local.dtype());
  std::vector<LogicalRun> runs = region.runs;
  check_finite(region, host);
  std::size_t next_run = 0;
  for (Block block : blocks_of_runs(runs)) {
    block.tensor = region.tensor;
    block.kind = region.kind;
    block.dtype = region.local.dtype();
    block.offset = written_;
    Xxh64 block_hash;
    // The block's runs are the next `count` non-empty runs, in order.
    for (int64_t k = 0; k < block.count; ++next_run) {
      const LogicalRun& r = runs[next_run];
      if (r.length <= 0) continue;
      const std::byte* data = host + static_cast<std::size_t>(r.local) * element;
      const std::size_t bytes = static_cast<std::size_t>(r.length) * element;
      write_fully(fd_, data, bytes, tmp_);
      hash_.update(data, bytes);
      block_hash.update(data, bytes);
      written_ += bytes;
      ++k;
    }
    block.xxh64 = block_hash.hex();
    entry_.blocks.push_back(std::move(block));
  }
}

void ShardWriter::check_finite(const StateRegion& region, const std::byte* host) const {
  const std::size_t element = dtype_size(region.local.dtype());
  NonFiniteValues all;
  int64_t first_logical = -1;
  for (const LogicalRun& r : region.runs) {
    if (r.length <= 0) continue;
    const NonFiniteValues found =
        find_nonfinite(host + static_cast<std::size_t>(r.local) * element, r.length, region.local.dtype());
    if (found.count == 0) continue;
    if (all.count == 0) {
      all.first_value = found.first_value;
      first_logical = r.logical + found.first;
    }
    all.count += found.count;
  }
  TRIPOD_CHECK(all.count == 0, "rank ", entry_.rank, "'s ", describe_nonfinite(region.tensor, region.kind, all, first_logical),
               " after step ", step_, "'s update (training diverged): a state that trains into NaN is not saved");
}

ShardFile ShardWriter::finish() {
  TRIPOD_CHECK(::fsync(fd_) == 0, "fsync of ", tmp_.string(), " failed: ", last_system_error());
  const int closed = ::close(fd_);
  fd_ = -1;
  TRIPOD_CHECK(closed == 0, "closing ", tmp_.string(), " failed: ", last_system_error());
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  TRIPOD_CHECK(!ec, "cannot rename ", tmp_.string(), " to ", path_.string(), ": ", ec.message());
  entry_.bytes = written_;
  entry_.xxh64 = hash_.hex();
  return entry_;
}

void check_shard_header(int fd, const fs::path& path, const ShardFile& entry, int64_t step) {
  struct stat st {};
  TRIPOD_CHECK(::fstat(fd, &st) == 0, "cannot stat ", path.string(), ": ", last_system_error());
  TRIPOD_CHECK(S_ISREG(st.st_mode), "checkpoint shard ", path.string(), " is not a regular file");
  TRIPOD_CHECK(static_cast<uint64_t>(st.st_size) == entry.bytes, "checkpoint shard ", path.string(), " is ", st.st_size,
               " bytes but the manifest records ", entry.bytes,
               st.st_size < static_cast<off_t>(entry.bytes) ? " (truncated)" : "");
  TRIPOD_CHECK(entry.bytes >= kShardHeaderBytes, "checkpoint shard ", path.string(), " is shorter than its header");
  std::array<std::byte, kShardHeaderBytes> header{};
  read_fully(fd, header.data(), header.size(), 0, path);
  const auto expected = header_bytes(entry.rank, step);
  TRIPOD_CHECK(std::memcmp(header.data(), kMagic, 8) == 0, "checkpoint shard ", path.string(),
               " does not start with TRIPODCK (not a shard file, or its header is damaged)");
  TRIPOD_CHECK(header == expected, "checkpoint shard ", path.string(), "'s header does not match the manifest (rank ",
               entry.rank, ", step ", step, ", version ", kManifestVersion,
               "): it is damaged or from another checkpoint");
}

}  // namespace tripod::ckpt
