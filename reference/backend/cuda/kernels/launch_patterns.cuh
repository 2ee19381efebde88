// The two shapes most kernels of this folder take, as generic kernels over an operation functor:
//
// One thread per element (fill, convert, add, GELU, AdamW, ...): kElementwiseThreads a block, a
// grid-stride loop over [0, n). An ElementOp provides  __device__ void operator()(int64_t i) const.
//
// A warp per row, for [rows, C] tensors whose rows are independent (bias_add, the embedding
// lookups, LayerNorm): lane l of a row's warp handles channels l, l + 32, ..., so the warp's loads
// and stores are coalesced and a row's reduction stays in the warp (shuffles, no shared memory).
// kWarpRowsPerBlock rows a block, blocks looping over rows with a grid stride; the loop bound is
// the same for every lane, so full-warp shuffles inside the op are safe.
// A RowOp provides  __device__ void operator()(int64_t row, int lane) const.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/kernels/device_launch.cuh"

namespace tripod::cuda {

constexpr int kWarpRowsPerBlock = 8;
constexpr int kWarpRowsThreads = kWarpRowsPerBlock * kWarpSize;

template <class RowOp>
__global__ void __launch_bounds__(kWarpRowsThreads) warp_rows_kernel(RowOp op, int64_t rows) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpRowsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / kWarpSize; row < rows;
       row += stride)
    op(row, lane);
}

// Launches warp_rows_kernel over `rows` rows on ctx.stream (nothing for rows == 0).
template <class RowOp>
void launch_warp_rows(const RowOp& op, int64_t rows, const CudaContext& ctx, const char* kernel_name) {
  if (rows == 0) return;
  const LaunchShape shape = rows_launch(rows, kWarpSize, kWarpRowsPerBlock, 0, ctx.limits);
  check_fits(shape, ctx.limits, kernel_name);
  warp_rows_kernel<<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(op, rows);
  check_launch(kernel_name);
}

constexpr int kElementwiseThreads = 256;

template <class ElementOp>
__global__ void __launch_bounds__(kElementwiseThreads) elementwise_kernel(ElementOp op, int64_t n) {
  const int64_t stride = global_thread_count();
  for (int64_t i = global_thread_index(); i < n; i += stride) op(i);
}

template <class ElementOp>
void launch_elementwise(const ElementOp& op, int64_t n, const CudaContext& ctx, const char* kernel_name) {
  if (n == 0) return;
  const LaunchShape shape = elementwise_launch(n, kElementwiseThreads, ctx.limits);
  check_fits(shape, ctx.limits, kernel_name);
  elementwise_kernel<<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(op, n);
  check_launch(kernel_name);
}

}  // namespace tripod::cuda
