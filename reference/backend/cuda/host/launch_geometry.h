// Launch geometry as pure host functions: what grid and block a kernel gets for a problem size,
// and whether that fits the device. No CUDA header is needed, so the rules are unit-tested on any
// machine (suites/unit/test_launch_geometry.cpp) and a launch that would fail on a GPU fails here
// first, naming the kernel and the limit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tripod::cuda {

// The limits of one device (copied from cudaDeviceProp by the CUDA backend).
struct DeviceLimits {
  int64_t max_grid_x = 2147483647;
  int64_t max_grid_y = 65535;
  int max_threads_per_block = 1024;
  std::size_t shared_per_block = 48 * 1024;         // dynamic shared memory without opting in
  std::size_t shared_per_block_optin = 227 * 1024;  // with cudaFuncAttributeMaxDynamicSharedMemorySize
  int multiprocessors = 132;
  int warp_size = 32;
};
// An H200's (and H100 SXM's) limits, for tests and for planning without a device.
DeviceLimits h200_limits();

struct LaunchShape {
  int64_t grid_x = 1, grid_y = 1;
  int block = 1;
  std::size_t shared_bytes = 0;
  // The launcher raises the kernel's limit (cudaFuncSetAttribute) before launching: needed for more
  // than shared_per_block. Only the launcher can say so, so no shape function sets it.
  bool shared_opted_in = false;
};

// One thread per element, `block` threads a block. When n needs more blocks than a grid may hold,
// the grid is capped and the kernel covers the rest with a grid-stride loop (kernels always loop).
LaunchShape elementwise_launch(int64_t n, int block, const DeviceLimits& limits);

// `rows` independent rows, `threads_per_row` threads each (a warp, or a block for one row),
// `rows_per_block` rows a block, `shared_bytes` of dynamic shared memory a block. Capped like
// elementwise_launch: kernels loop over rows with a grid stride.
LaunchShape rows_launch(int64_t rows, int threads_per_row, int rows_per_block, std::size_t shared_bytes,
                        const DeviceLimits& limits);

// Throws tripod::Error naming `kernel` and the limit a shape exceeds (threads a block, grid size,
// shared memory beyond even the opt-in limit, a block that is not whole warps).
void check_fits(const LaunchShape& shape, const DeviceLimits& limits, const char* kernel);

}  // namespace tripod::cuda
