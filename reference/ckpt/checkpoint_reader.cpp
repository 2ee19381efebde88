#include "ckpt/checkpoint_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "ckpt/durable_file.h"
#include "ckpt/finite_values.h"
#include "ckpt/shard_file.h"
#include "core/bf16.h"
#include "core/error.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;

namespace {

double element_as_double(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::F32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::F64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::BF16: { bf16 h; std::memcpy(&h.bits, p, 2); return bf16_to_float(h); }
    default: fail("checkpoint blocks hold fp32, fp64 or bf16");
  }
}

void store_double(double value, std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::F32: { const float f = static_cast<float>(value); std::memcpy(p, &f, 4); return; }
    case DType::F64: std::memcpy(p, &value, 8); return;
    case DType::BF16: { const bf16 h = double_to_bf16(value); std::memcpy(p, &h.bits, 2); return; }
    default: fail("checkpoint state is fp32, fp64 or bf16");
  }
}

}  // namespace

CheckpointReader::CheckpointReader(const fs::path& dir) : dir_(dir) {
  const fs::path path = dir / kManifestFile;
  TRIPOD_CHECK(fs::is_directory(dir), "checkpoint ", dir.string(), " does not exist or is not a directory");
  TRIPOD_CHECK(fs::exists(path), "checkpoint ", dir.string(), " has no ", kManifestFile,
               " (an unfinished save, or not a checkpoint): it cannot be loaded");
  manifest_ = parse_manifest(read_text(path), path.string());
  fds_.assign(manifest_.files.size(), -1);
}

CheckpointReader::~CheckpointReader() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

int CheckpointReader::open_file(std::size_t file) {
  if (fds_[file] >= 0) return fds_[file];
  const ShardFile& entry = manifest_.files[file];
  const fs::path path = dir_ / entry.name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIPOD_CHECK(fd >= 0, "checkpoint ", dir_.string(), ": cannot open shard file ", entry.name, " (rank ", entry.rank,
               "'s): ", last_system_error());
  try {
    check_shard_header(fd, path, entry, manifest_.step);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fds_[file] = fd;
}

std::vector<std::byte> CheckpointReader::read_block(std::size_t file, std::size_t block) {
  const ShardFile& entry = manifest_.files[file];
  const Block& b = entry.blocks[block];
  std::vector<std::byte> bytes(b.bytes());
  read_fully(open_file(file), bytes.data(), bytes.size(), b.offset, dir_ / entry.name);
  const std::string actual = xxh64_hex(bytes.data(), bytes.size());
  TRIPOD_CHECK(actual == b.xxh64, "checkpoint shard ", (dir_ / entry.name).string(), " is damaged in tensor '",
               b.tensor, "' (", b.kind, ", bytes ", b.offset, "..", b.offset + b.bytes(), "): checksum ", actual,
               " but the manifest records ", b.xxh64);
  // Intact, but not a state to train from: an earlier Tripod saved such a state at a divergence.
  if (const NonFiniteValues found = find_nonfinite(bytes.data(), b.numel(), b.dtype); found.count > 0)
    fail("checkpoint shard ", (dir_ / entry.name).string(), ": ",
         describe_nonfinite(b.tensor, b.kind, found, block_logical_element(b, found.first)),
         ": a state that trains into NaN (saved at a divergence)");
  return bytes;
}

const std::vector<CheckpointReader::Piece>& CheckpointReader::pieces(const std::string& tensor, const std::string& kind) {
  if (index_.empty()) {
    for (std::size_t f = 0; f < manifest_.files.size(); ++f)
      for (std::size_t k = 0; k < manifest_.files[f].blocks.size(); ++k) {
        const Block& b = manifest_.files[f].blocks[k];
        for (int64_t r = 0; r < b.count; ++r)
          index_[{b.tensor, b.kind}].push_back({b.start + r * b.stride, b.length, f, k, r * b.length});
      }
    for (auto& [key, list] : index_)
      std::sort(list.begin(), list.end(), [](const Piece& a, const Piece& b) { return a.logical < b.logical; });
  }
  const auto it = index_.find({tensor, kind});
  TRIPOD_CHECK(it != index_.end(), "checkpoint ", dir_.string(), " holds no ", kind, " of tensor '", tensor, "'");
  return it->second;
}

void CheckpointReader::copy_logical(const std::string& tensor, const std::string& kind, int64_t first, int64_t count,
                                    DType dtype, std::byte* out,
                                    std::map<std::pair<std::size_t, std::size_t>, std::vector<std::byte>>& cache) {
  const std::vector<Piece>& list = pieces(tensor, kind);
  const std::size_t out_size = dtype_size(dtype);
  // The first piece that may hold `first`: the last one starting at or before it.
  auto it = std::upper_bound(list.begin(), list.end(), first, [](int64_t x, const Piece& p) { return x < p.logical; });
  if (it != list.begin()) --it;
  int64_t at = first;
  const int64_t end = first + count;
  for (; at < end && it != list.end(); ++it) {
    if (it->logical + it->length <= at) continue;
    TRIPOD_CHECK(it->logical <= at, "checkpoint ", dir_.string(), ": element ", at, " of tensor '", tensor, "' (", kind,
                 ") is in no block (the checkpoint does not cover it)");
    const auto key = std::make_pair(it->file, it->block);
    if (!cache.count(key)) cache[key] = read_block(it->file, it->block);
    const Block& b = manifest_.files[it->file].blocks[it->block];
    const std::byte* src = cache[key].data() + static_cast<std::size_t>(it->element + (at - it->logical)) * dtype_size(b.dtype);
    const int64_t n = std::min(end, it->logical + it->length) - at;
    std::byte* dst = out + static_cast<std::size_t>(at - first) * out_size;
    if (b.dtype == dtype) {
      std::memcpy(dst, src, static_cast<std::size_t>(n) * out_size);
    } else {
      for (int64_t i = 0; i < n; ++i)
        store_double(element_as_double(src + i * dtype_size(b.dtype), b.dtype), dst + i * out_size, dtype);
    }
    at += n;
  }
  TRIPOD_CHECK(at == end, "checkpoint ", dir_.string(), ": element ", at, " of tensor '", tensor, "' (", kind,
               ") is in no block (the checkpoint does not cover it)");
}

void CheckpointReader::load(const StateRegion& region, Backend& backend) {
  const auto shape = manifest_.tensors.find(region.tensor);
  TRIPOD_CHECK(shape != manifest_.tensors.end(), "checkpoint ", dir_.string(), " has no tensor '", region.tensor,
               "' (a checkpoint of another model?)");
  TRIPOD_CHECK(shape->second == region.logical_shape, "checkpoint ", dir_.string(), ": tensor '", region.tensor,
               "' is ", shape_str(shape->second), " there but ", shape_str(region.logical_shape), " in this model");
  std::vector<std::byte> host(region.local.bytes());
  backend.download(region.local, host.data());  // keeps the padding as it is
  std::map<std::pair<std::size_t, std::size_t>, std::vector<std::byte>> cache;
  const std::size_t element = dtype_size(region.local.dtype());
  for (const LogicalRun& r : region.runs)
    copy_logical(region.tensor, region.kind, r.logical, r.length, region.local.dtype(),
                 host.data() + static_cast<std::size_t>(r.local) * element, cache);
  backend.upload(host.data(), region.local);
}

std::vector<double> CheckpointReader::read_tensor(const std::string& tensor, const std::string& kind) {
  const auto shape = manifest_.tensors.find(tensor);
  TRIPOD_CHECK(shape != manifest_.tensors.end(), "checkpoint ", dir_.string(), " has no tensor '", tensor, "'");
  const int64_t n = shape_numel(shape->second);
  std::vector<double> values(static_cast<std::size_t>(n));
  std::map<std::pair<std::size_t, std::size_t>, std::vector<std::byte>> cache;
  copy_logical(tensor, kind, 0, n, DType::F64, reinterpret_cast<std::byte*>(values.data()), cache);
  return values;
}

}  // namespace tripod::ckpt
