// Sums across a warp and a block in a fixed order (the same shuffles every time, so a rerun is
// bit-identical). Every thread of the warp or block must call them (full-mask shuffles).
#pragma once
#include "backend/cuda/kernels/device_launch.cuh"

namespace tripod::cuda {

// Butterfly: after the five steps every lane holds the same total, since lane l adds v[l ^ o] to
// v[l] and lane l ^ o adds v[l] to v[l ^ o], the same rounded sum (addition commutes exactly).
template <typename T>
__device__ __forceinline__ T warp_sum_all(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

// The sum over a block of kThreads threads (a multiple of 32, at most 1024), valid in thread 0.
// Each warp sums its lanes, then warp 0 sums the warps' totals in the same butterfly.
template <int kThreads, typename T>
__device__ __forceinline__ T block_sum(T v) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= kWarpSize * kWarpSize, "block_sum: whole warps, <= 1024");
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ T warp_totals[kWarps];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_sum_all(v);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  T total = 0;
  if (warp == 0) total = warp_sum_all(lane < kWarps ? warp_totals[lane] : T(0));
  return total;
}

}  // namespace tripod::cuda
