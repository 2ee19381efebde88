// The manifest of a sharded checkpoint (manifest.json, written last: a checkpoint without its
// manifest does not exist). It says what was saved, from which run, and where every element is:
//
//   format "tripod-checkpoint", version 2, step, dtype, the resolved run configuration, the layout
//   and world size it was saved from, the data loader's position (next_sample, seed, batch_size,
//   seq_len, and the training tokens' XXH64 where known), the logical shape of every tensor, and per shard file its size, XXH64 and blocks.
//   A block is one piece of one logical tensor's state ("param", "adam_m" or "adam_v") in logical
//   coordinates: `count` runs of `length` elements, run k starting at flat element
//   start + k * stride of the tensor (row-major), stored contiguously at byte `offset` of the file,
//   with its own XXH64 so that a damaged byte is reported with the tensor it belongs to.
//   "checksum" is the XXH64 of the manifest's own canonical text without that field.
//
// parse_manifest validates everything a reader relies on (types, ranges, blocks inside their
// tensor and their file, no overflow) before anything is read, so that a damaged or hostile
// manifest is an Error naming the file and entry, never a crash or a read out of bounds.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tripod::ckpt {

inline constexpr const char* kCheckpointFormat = "tripod-checkpoint";
inline constexpr int kManifestVersion = 2;
inline constexpr const char* kManifestFile = "manifest.json";

struct Block {
  std::string tensor, kind;
  DType dtype = DType::F32;
  int64_t start = 0, length = 0, stride = 0, count = 0;  // logical runs (see above)
  uint64_t offset = 0;                                    // bytes from the start of the file
  std::string xxh64;                                      // of the block's bytes

  int64_t numel() const { return length * count; }
  uint64_t bytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
};

struct ShardFile {
  std::string name;  // relative to the checkpoint directory
  int rank = 0;
  uint64_t bytes = 0;
  std::string xxh64;  // of the whole file
  std::vector<Block> blocks;
};

struct DataPosition {
  int64_t next_sample = 0;  // global index of the first sample the next step reads
  uint64_t seed = 0;
  int64_t batch_size = 0, seq_len = 0;
  // The training split's TokenDataset::tokens_xxh64: which corpus next_sample counts into. Empty
  // where not recorded (checkpoints written before 2026-12-06, and saves that read no corpus).
  std::string train_tokens_xxh64;
  // The tokens the steps so far trained on (the metrics' cumulative "tokens"), which a batch changed
  // at a resume makes more than step x batch x seq_len. -1 where not recorded (before 2026-12-08).
  int64_t tokens_trained = -1;
};

struct Manifest {
  int version = kManifestVersion;
  int64_t step = 0;  // optimizer steps taken; training resumes at this step
  // Of those, the updates applied (AdamW's bias correction counts them; a skipped step is none).
  // Written only where it differs from step; -1 read: as many as steps (every step applied).
  int64_t updates = -1;
  DType dtype = DType::F32;
  nlohmann::json config;  // the resolved run configuration
  std::string layout;     // "single process" or the parallel layout's description
  int world_size = 1;
  DataPosition data;
  // The anomaly guard's window of accepted losses (train/step_guard.h), oldest first, so that spike
  // detection goes on across a resume; empty where not recorded (before 2026-12-08) or not kept.
  std::vector<double> recent_losses;
  std::map<std::string, Shape> tensors;  // logical shapes
  std::vector<ShardFile> files;
};

// A file entry as the manifest encodes it, and back (from a rank of the same save: unvalidated;
// parse_manifest validates what is read from disk).
nlohmann::json shard_file_to_json(const ShardFile& file);
ShardFile shard_file_from_json(const nlohmann::json& j);

// Canonical JSON text with its "checksum" field.
std::string manifest_text(const Manifest& manifest);
// Parses and validates (see above); `origin` (the path) starts every message.
Manifest parse_manifest(std::string_view text, const std::string& origin);


}  // namespace tripod::ckpt
