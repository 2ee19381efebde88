// Tripod's first checkpoint format (version 1, single process only), read so that it can be
// converted (`tripod ckpt upgrade`): a directory with
//   model.safetensors      parameters under their logical names
//   optimizer.safetensors  AdamW moments as "m.<name>" and "v.<name>"
//   state.json             format, version 1, step, dtype, the run configuration and each file's XXH64
#pragma once
#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"

namespace tripod::ckpt {

struct LegacyCheckpoint {
  int64_t step = 0;
  DType dtype = DType::F32;
  nlohmann::json config;
  SafetensorsFile model, optimizer;
};

// Reads and checks (format, version, every file's checksum) a version-1 checkpoint.
LegacyCheckpoint read_legacy_checkpoint(const std::filesystem::path& dir);

}  // namespace tripod::ckpt
