// How the CUDA backend's one AdamW launch over many runs (Backend::adamw_runs;
// backend/cuda/kernels/adamw_runs.cu) splits the work: each run into blocks of
// kAdamWBlockElements elements, numbered run after run; a block finds its run by a binary search
// over the runs' first blocks. Pure functions, unit-tested on the host (test_adamw_runs_math.cpp):
// every element of every run belongs to exactly one block.
#pragma once
#include <cstdint>

#include "backend/kernels/host_device.h"

namespace tripod::kernels {

inline constexpr int kAdamWRunsPerLaunch = 64;  // the run table rides in the kernel's parameters (< 4 KiB)
inline constexpr int64_t kAdamWBlockElements = 4096;

// first_block[r] = the blocks of runs 0 .. r - 1 (first_block[0] = 0; first_block[count] = all).
inline void adamw_first_blocks(const int64_t* lengths, int count, int64_t* first_block) {
  first_block[0] = 0;
  for (int r = 0; r < count; ++r)
    first_block[r + 1] = first_block[r] + (lengths[r] + kAdamWBlockElements - 1) / kAdamWBlockElements;
}

// The run that block `block` (< first_block[count]) belongs to: the last r with first_block[r] <=
// block, which is a run with blocks (an empty run shares its first block with the next run).
TRIPOD_HD int adamw_run_of_block(const int64_t* first_block, int count, int64_t block) {
  int lo = 0, hi = count;  // first_block[lo] <= block < first_block[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first_block[mid] <= block) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace tripod::kernels
