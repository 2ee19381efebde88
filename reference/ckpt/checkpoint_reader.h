// Reads a sharded checkpoint into whatever a rank holds now, under any layout: each state region
// (core/state_region.h) is filled from the blocks that cover its logical elements, whichever rank
// wrote them, reading only those blocks, and checking each block's XXH64 before it is used (a
// damaged block is an error naming the file and tensor, never loaded).
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "ckpt/manifest.h"
#include "core/state_region.h"

namespace tripod::ckpt {

class CheckpointReader {
 public:
  // `dir` is one checkpoint (its manifest.json); parses and validates the manifest.
  explicit CheckpointReader(const std::filesystem::path& dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& dir() const { return dir_; }

  // Every logical element of the region's runs, converted to its dtype, into region.local
  // (padding untouched). A tensor or shape the checkpoint does not have, or an element that no
  // block holds, is an error naming the tensor.
  void load(const StateRegion& region, Backend& backend);
  // One whole logical tensor's state, as doubles (exports, tools).
  std::vector<double> read_tensor(const std::string& tensor, const std::string& kind);
  // Opens a shard file once, checking its size and header against the manifest; the descriptor.
  int open_file(std::size_t file);
  // A block's bytes, checksum verified and every value a number (ckpt/finite_values.h).
  std::vector<std::byte> read_block(std::size_t file, std::size_t block);

 private:
  struct Piece {  // one run of one block: logical [logical, logical + length) at element `element` of the block
    int64_t logical, length;
    std::size_t file, block;
    int64_t element;
  };
  const std::vector<Piece>& pieces(const std::string& tensor, const std::string& kind);
  // Copies logical [first, first + count) of (tensor, kind) to `out` (dtype `dtype`), from cached blocks.
  void copy_logical(const std::string& tensor, const std::string& kind, int64_t first, int64_t count, DType dtype,
                    std::byte* out, std::map<std::pair<std::size_t, std::size_t>, std::vector<std::byte>>& cache);

  std::filesystem::path dir_;
  Manifest manifest_;
  std::map<std::pair<std::string, std::string>, std::vector<Piece>> index_;  // sorted by logical start
  std::vector<int> fds_;  // -1 until opened (and the header checked)
};

}  // namespace tripod::ckpt
