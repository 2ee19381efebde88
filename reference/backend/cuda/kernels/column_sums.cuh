// Sums over the rows of a [rows, channels] matrix, column by column, without atomics and in an
// order that depends only on the sizes (backend/kernels/reduction_math.h describes it): bias
// gradients (reductions.cu) and LayerNorm's weight and bias gradients (layernorm.cu).
//
// A block owns a strip of 32 columns: lane l of warp w sums rows w, w + W, w + 2W, ... of column
// strip * 32 + l (W = kColumnSumWarps), so each row of the strip is one coalesced warp load; the
// block then adds the W partials in warp order and the Columns functor adds the totals into the
// gradients. Blocks loop over strips with a grid stride.
//
// A Columns functor provides:
//   using Value = T;  static constexpr int kSums;
//   __device__ void add_row(int64_t row, int64_t c, T (&sums)[kSums]) const;   // row's terms of column c
//   __device__ void finish(int64_t c, const T (&totals)[kSums]) const;          // e.g. dbias[c] += totals[0]
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/kernels/device_launch.cuh"
#include "backend/kernels/reduction_math.h"

namespace tripod::cuda {

constexpr int kColumnSumThreads = kernels::kColumnSumWarps * kWarpSize;

template <class Columns>
__global__ void __launch_bounds__(kColumnSumThreads)
    column_sums_kernel(Columns columns, int64_t rows, int64_t channels) {
  using T = typename Columns::Value;
  constexpr int kSums = Columns::kSums;
  constexpr int kWarps = kernels::kColumnSumWarps;
  // [sum][warp][lane]: lanes write adjacent words and lane l reads its column down the warps,
  // both without bank conflicts.
  __shared__ T partial[kSums][kWarps][kernels::kColumnStrip];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t strips = (channels + kernels::kColumnStrip - 1) / kernels::kColumnStrip;
  for (int64_t strip = blockIdx.x; strip < strips; strip += gridDim.x) {
    const int64_t c = strip * kernels::kColumnStrip + lane;
    T sums[kSums];
    for (int s = 0; s < kSums; ++s) sums[s] = 0;
    if (c < channels) {
#pragma unroll 4
      for (int64_t r = warp; r < rows; r += kWarps) columns.add_row(r, c, sums);
    }
    for (int s = 0; s < kSums; ++s) partial[s][warp][lane] = sums[s];
    __syncthreads();
    if (warp == 0 && c < channels) {
      T totals[kSums];
      for (int s = 0; s < kSums; ++s) {
        totals[s] = partial[s][0][lane];
        for (int w = 1; w < kWarps; ++w) totals[s] += partial[s][w][lane];
      }
      columns.finish(c, totals);
    }
    __syncthreads();  // the next strip overwrites `partial`
  }
}

// Launches column_sums_kernel on ctx.stream; `kernel_name` names it in errors.
template <class Columns>
void launch_column_sums(const Columns& columns, int64_t rows, int64_t channels, const CudaContext& ctx,
                        const char* kernel_name) {
  if (rows == 0 || channels == 0) return;  // nothing to add
  const int64_t strips = (channels + kernels::kColumnStrip - 1) / kernels::kColumnStrip;
  const LaunchShape shape = rows_launch(strips, kColumnSumThreads, 1, 0, ctx.limits);
  check_fits(shape, ctx.limits, kernel_name);
  column_sums_kernel<<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(columns, rows, channels);
  check_launch(kernel_name);
}

}  // namespace tripod::cuda
