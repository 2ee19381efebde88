// Single-rank training checkpoints: a directory with
//   model.safetensors      parameters under their logical names ([out, in] linear layout)
//   optimizer.safetensors  AdamW moments as "m.<name>" and "v.<name>"
//   state.json             format, step, dtype, the resolved run configuration and an XXH64
//                          checksum of each file, verified on load
// The directory is written beside the target and renamed into place, so a crash mid-save leaves
// the previous checkpoint intact. (The sharded, any-layout format comes with the parallel trainer.)
#pragma once
#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/param_set.h"
#include "ckpt/safetensors.h"
#include "optim/adamw.h"

namespace tripod::ckpt {

struct CheckpointState {
  int64_t step = 0;         // optimizer steps taken; the run resumes at this step
  DType dtype = DType::F32;
  nlohmann::json config;    // the resolved run configuration
};

// Saving replaces what is at `dir`, so `dir` must be absent, an empty directory, or a Tripod
// checkpoint (its state.json names the format); anything else — a folder of other files, a plain
// file — is refused, never deleted. The parent folder must exist or be creatable, and writable.
// save_checkpoint checks this too; callers check it at start-up, so a bad target is found before
// the training it would have lost.
void check_save_target(const std::filesystem::path& dir);

void save_checkpoint(const std::filesystem::path& dir, Backend& backend, const ParamSet& params,
                     const AdamW* optimizer, const CheckpointState& state);

// Reads and validates state.json and the file checksums.
CheckpointState read_checkpoint_state(const std::filesystem::path& dir);

// Loads parameters (and, if given, optimizer moments) into tensors of the same logical shapes;
// a missing tensor or a shape mismatch is an error naming the tensor and the file.
CheckpointState load_checkpoint(const std::filesystem::path& dir, Backend& backend, const ParamSet& params,
                                const AdamW* optimizer);

// Host copy of a tensor in its own dtype, named `name`.
HostTensor to_host_tensor(Backend& backend, const std::string& name, const Tensor& t);
// Copies a host tensor (same numel; fp32/fp64 converted if they differ) into `t`.
void from_host_tensor(Backend& backend, const HostTensor& host, const Tensor& t, const std::string& origin);

}  // namespace tripod::ckpt
