// Sums over the rows of a [rows, channels] matrix, column by column, without atomics and in an
// order that depends only on the sizes (backend/kernels/reduction_math.h describes it): bias
// gradients (reductions.cu) and LayerNorm's weight and bias gradients (layernorm.cu).
//
// The rows split into column_chunks(rows) chunks of kColumnChunkRows. A block owns a strip of 32
// columns of one chunk: lane l of warp w sums the chunk's rows w, w + W, w + 2W, ... of column
// strip * 32 + l (W = kColumnSumWarps), so each row of the strip is one coalesced warp load; the
// block then adds the W partials in warp order. With one chunk the Columns functor adds the totals
// into the gradients at once; with more, each block writes its chunk's partials [chunk, sum, c]
// to stream-ordered scratch and a second kernel (a thread a column) adds them in chunk order and
// calls the functor. Why chunks: a strip per block alone gives GPT-2's [8192, 768] gradients 24
// blocks, a fifth of an H200's 132 multiprocessors, each reading 8192 rows one after another.
// Blocks loop over (strip, chunk) pairs with a grid stride; neighbouring blocks take neighbouring
// strips of the same rows.
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
#include "backend/cuda/kernels/stream_scratch.cuh"
#include "backend/kernels/reduction_math.h"

namespace tripod::cuda {

constexpr int kColumnSumThreads = kernels::kColumnSumWarps * kWarpSize;
constexpr int kColumnFinishThreads = 256;

// `partials` null: one chunk, the totals go to the functor; else partials[(chunk * kSums + s) *
// channels + c] = the chunk's sum s of column c.
template <class Columns>
__global__ void __launch_bounds__(kColumnSumThreads)
    column_sums_kernel(Columns columns, int64_t rows, int64_t channels, typename Columns::Value* partials) {
  using T = typename Columns::Value;
  constexpr int kSums = Columns::kSums;
  constexpr int kWarps = kernels::kColumnSumWarps;
  // [sum][warp][lane]: lanes write adjacent words and lane l reads its column down the warps,
  // both without bank conflicts.
  __shared__ T partial[kSums][kWarps][kernels::kColumnStrip];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t strips = (channels + kernels::kColumnStrip - 1) / kernels::kColumnStrip;
  const int64_t chunks = kernels::column_chunks(rows);
  for (int64_t job = blockIdx.x; job < strips * chunks; job += gridDim.x) {
    const int64_t strip = job % strips, chunk = job / strips;
    const int64_t c = strip * kernels::kColumnStrip + lane;
    const int64_t first = chunk * kernels::kColumnChunkRows;
    const int64_t end = first + kernels::kColumnChunkRows < rows ? first + kernels::kColumnChunkRows : rows;
    T sums[kSums];
    for (int s = 0; s < kSums; ++s) sums[s] = 0;
    if (c < channels) {
#pragma unroll 4
      for (int64_t r = first + warp; r < end; r += kWarps) columns.add_row(r, c, sums);
    }
    for (int s = 0; s < kSums; ++s) partial[s][warp][lane] = sums[s];
    __syncthreads();
    if (warp == 0 && c < channels) {
      T totals[kSums];
      for (int s = 0; s < kSums; ++s) {
        totals[s] = partial[s][0][lane];
        for (int w = 1; w < kWarps; ++w) totals[s] += partial[s][w][lane];
      }
      if (partials == nullptr) {
        columns.finish(c, totals);
      } else {
        for (int s = 0; s < kSums; ++s) partials[(chunk * kSums + s) * channels + c] = totals[s];
      }
    }
    __syncthreads();  // the next job overwrites `partial`
  }
}

// The second pass: column c's chunk partials added in chunk order, from chunk 0's, then finish().
template <class Columns>
__global__ void __launch_bounds__(kColumnFinishThreads)
    column_chunks_finish_kernel(Columns columns, int64_t chunks, int64_t channels,
                                const typename Columns::Value* partials) {
  using T = typename Columns::Value;
  constexpr int kSums = Columns::kSums;
  for (int64_t c = global_thread_index(); c < channels; c += global_thread_count()) {
    T totals[kSums];
    for (int s = 0; s < kSums; ++s) totals[s] = partials[s * channels + c];
    for (int64_t chunk = 1; chunk < chunks; ++chunk)
      for (int s = 0; s < kSums; ++s) totals[s] += partials[(chunk * kSums + s) * channels + c];
    columns.finish(c, totals);
  }
}

// Launches the column sums on ctx.stream; `kernel_name` names them in errors.
template <class Columns>
void launch_column_sums(const Columns& columns, int64_t rows, int64_t channels, const CudaContext& ctx,
                        const char* kernel_name) {
  using T = typename Columns::Value;
  if (rows == 0 || channels == 0) return;  // nothing to add
  const int64_t strips = (channels + kernels::kColumnStrip - 1) / kernels::kColumnStrip;
  const int64_t chunks = kernels::column_chunks(rows);
  const LaunchShape shape = rows_launch(strips * chunks, kColumnSumThreads, 1, 0, ctx.limits);
  check_fits(shape, ctx.limits, kernel_name);
  if (chunks == 1) {
    column_sums_kernel<<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(columns, rows, channels,
                                                                                         nullptr);
    check_launch(kernel_name);
    return;
  }
  StreamScratch partials(static_cast<std::size_t>(chunks * Columns::kSums * channels) * sizeof(T), ctx.stream,
                         "cudaMallocAsync (column-sum partials)");
  column_sums_kernel<<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(columns, rows, channels,
                                                                                       partials.as<T>());
  check_launch(kernel_name);
  const LaunchShape finish = rows_launch((channels + kColumnFinishThreads - 1) / kColumnFinishThreads,
                                         kColumnFinishThreads, 1, 0, ctx.limits);
  check_fits(finish, ctx.limits, kernel_name);
  column_chunks_finish_kernel<<<grid_of(finish), finish.block, 0, ctx.stream>>>(columns, chunks, channels,
                                                                                 partials.as<T>());
  check_launch(kernel_name);
}

}  // namespace tripod::cuda
