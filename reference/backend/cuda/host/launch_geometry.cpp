#include "backend/cuda/host/launch_geometry.h"

#include <algorithm>

#include "core/error.h"

namespace tripod::cuda {

DeviceLimits h200_limits() { return DeviceLimits{}; }

LaunchShape elementwise_launch(int64_t n, int block, const DeviceLimits& limits) {
  check(n >= 0, "elementwise_launch: negative size ", n);
  check(block > 0 && block <= limits.max_threads_per_block, "elementwise_launch: ", block,
        " threads a block (the device allows 1 to ", limits.max_threads_per_block, ")");
  LaunchShape s;
  s.block = block;
  s.grid_x = std::clamp<int64_t>((n + block - 1) / block, 1, limits.max_grid_x);
  return s;
}

LaunchShape rows_launch(int64_t rows, int threads_per_row, int rows_per_block, std::size_t shared_bytes,
                        const DeviceLimits& limits) {
  check(rows >= 0, "rows_launch: negative row count ", rows);
  check(threads_per_row > 0 && rows_per_block > 0, "rows_launch: ", threads_per_row, " threads a row, ",
        rows_per_block, " rows a block");
  LaunchShape s;
  s.block = threads_per_row * rows_per_block;
  s.grid_x = std::clamp<int64_t>((rows + rows_per_block - 1) / rows_per_block, 1, limits.max_grid_x);
  s.shared_bytes = shared_bytes;
  return s;
}

void check_fits(const LaunchShape& s, const DeviceLimits& limits, const char* kernel) {
  check(s.block >= 1 && s.block <= limits.max_threads_per_block, kernel, ": ", s.block,
        " threads a block, the device allows ", limits.max_threads_per_block);
  check(s.block % limits.warp_size == 0 || s.block < limits.warp_size, kernel, ": ", s.block,
        " threads a block is not a whole number of ", limits.warp_size, "-thread warps");
  check(s.grid_x >= 1 && s.grid_x <= limits.max_grid_x, kernel, ": grid x of ", s.grid_x,
        " blocks, the device allows ", limits.max_grid_x);
  check(s.grid_y >= 1 && s.grid_y <= limits.max_grid_y, kernel, ": grid y of ", s.grid_y,
        " blocks, the device allows ", limits.max_grid_y);
  check(s.shared_bytes <= limits.shared_per_block_optin, kernel, ": ", s.shared_bytes,
        " bytes of shared memory a block, the device allows ", limits.shared_per_block_optin, " even opted in");
  check(s.shared_bytes <= limits.shared_per_block || s.shared_opted_in, kernel, ": ", s.shared_bytes,
        " bytes of shared memory a block need the opt-in attribute (over ", limits.shared_per_block, ")");
}

}  // namespace tripod::cuda
