// What every kernel of this folder shares for launching: a LaunchShape (host/launch_geometry.h)
// as a CUDA grid, and the grid-stride indices kernels loop with (a capped grid still covers every
// element; indices are 64-bit because tensors can exceed 2^31 elements).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/host/launch_geometry.h"

namespace tripod::cuda {

inline dim3 grid_of(const LaunchShape& shape) {
  return dim3(static_cast<unsigned>(shape.grid_x), static_cast<unsigned>(shape.grid_y), 1u);
}

__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xFFFFFFFFu;

}  // namespace tripod::cuda
