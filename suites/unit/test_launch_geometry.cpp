// Launch geometry of the CUDA kernels, checked without a GPU: the shapes cover the work, respect an
// H200's limits, and a launch that would fail on the device fails here, naming the kernel.
#include <gtest/gtest.h>

#include "backend/cuda/host/launch_geometry.h"
#include "core/error.h"
#include "support/error_text.h"

namespace tripod::cuda {
namespace {

TEST(LaunchGeometry, ElementwiseCoversEverySizeAndCapsTheGrid) {
  const DeviceLimits h200 = h200_limits();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{124'439'808}}) {
    const LaunchShape s = elementwise_launch(n, 256, h200);
    EXPECT_EQ(s.block, 256);
    EXPECT_GE(s.grid_x * s.block, std::max<int64_t>(n, 1)) << n;
    EXPECT_LT((s.grid_x - 1) * s.block, std::max<int64_t>(n, 1)) << "no block without work, n = " << n;
    EXPECT_NO_THROW(check_fits(s, h200, "test"));
  }
  // More elements than a grid may hold: capped, the kernel's grid-stride loop covers the rest.
  DeviceLimits small = h200;
  small.max_grid_x = 1000;
  const LaunchShape capped = elementwise_launch(int64_t{1} << 40, 256, small);
  EXPECT_EQ(capped.grid_x, 1000);
  EXPECT_NO_THROW(check_fits(capped, small, "test"));
}

TEST(LaunchGeometry, RowsGetWholeWarpsAndSharedMemoryOptIn) {
  const DeviceLimits h200 = h200_limits();
  LaunchShape s = rows_launch(8192, 32, 4, 0, h200);  // a warp a row, 4 rows a block
  EXPECT_EQ(s.block, 128);
  EXPECT_EQ(s.grid_x, 2048);
  EXPECT_FALSE(s.shared_opted_in);
  s = rows_launch(7, 32, 4, 0, h200);
  EXPECT_EQ(s.grid_x, 2);
  s = rows_launch(100, 1024, 1, 100 * 1024, h200);  // 100 KiB: over 48 KiB, under the 227 KiB opt-in
  // Only the launcher knows whether it raises the kernel's limit: the shape function set the flag
  // from the size itself, so a launcher that forgot cudaFuncSetAttribute passed check_fits.
  EXPECT_FALSE(s.shared_opted_in);
  EXPECT_NE(error_of([&] { check_fits(s, h200, "test"); }).find("need the opt-in attribute"), std::string::npos);
  s.shared_opted_in = true;
  EXPECT_NO_THROW(check_fits(s, h200, "test"));
  EXPECT_NO_THROW(check_fits(rows_launch(100, 256, 1, 48 * 1024, h200), h200, "at the limit"));
}

TEST(LaunchGeometry, ImpossibleLaunchesNameTheKernelAndTheLimit) {
  const DeviceLimits h200 = h200_limits();
  std::string m = error_of([&] { check_fits(rows_launch(10, 1024, 2, 0, h200), h200, "layernorm_forward"); });
  EXPECT_NE(m.find("layernorm_forward: 2048 threads a block, the device allows 1024"), std::string::npos) << m;
  m = error_of([&] { check_fits(rows_launch(10, 32, 1, 300 * 1024, h200), h200, "attention_forward"); });
  EXPECT_NE(m.find("attention_forward: 307200 bytes of shared memory"), std::string::npos) << m;
  LaunchShape forgot = rows_launch(10, 256, 1, 64 * 1024, h200);
  m = error_of([&] { check_fits(forgot, h200, "softmax"); });
  EXPECT_NE(m.find("need the opt-in attribute"), std::string::npos) << m;
  LaunchShape ragged;
  ragged.block = 48;
  m = error_of([&] { check_fits(ragged, h200, "bias_grad"); });
  EXPECT_NE(m.find("not a whole number of 32-thread warps"), std::string::npos) << m;
  m = error_of([&] { elementwise_launch(10, 2048, h200); });
  EXPECT_NE(m.find("2048 threads a block"), std::string::npos) << m;
}

}  // namespace
}  // namespace tripod::cuda
