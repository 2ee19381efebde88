// Warp and block reductions of the softmax kernels (attention.cu, cross_entropy.cu), in the fixed
// order that backend/kernels/row_reduce_math.h describes and replays on the host: each warp's xor
// butterfly, then the warps' results combined in warp order. No atomics: the result depends only
// on the values and the block size.
#pragma once
#include "backend/kernels/row_reduce_math.h"

namespace tripod::cuda {

// Lane i ^ offset's value (a state pair field by field).
template <typename T>
__device__ __forceinline__ T shuffle_xor(T value, int offset) {
  return __shfl_xor_sync(0xffffffffu, value, offset);
}
template <typename T>
__device__ __forceinline__ kernels::ExpSumState<T> shuffle_xor(kernels::ExpSumState<T> value, int offset) {
  return {shuffle_xor(value.max, offset), shuffle_xor(value.sum, offset)};
}

// Every lane gets combine over the warp's 32 values (lane i combines its value with lane i ^ offset's,
// offsets 16..1; a sum is commutative, so all lanes hold the same bits).
template <typename T, typename Combine>
__device__ __forceinline__ T warp_reduce(T value, Combine combine) {
  for (int offset = kernels::kWarpLanes / 2; offset > 0; offset /= 2) value = combine(value, shuffle_xor(value, offset));
  return value;
}

// Every thread of the block must call it (it synchronises) with blockDim.x a multiple of 32;
// every thread gets the result. `scratch`: shared memory for one value a warp, free again on return.
template <typename T, typename Combine>
__device__ __forceinline__ T block_reduce(T value, T* scratch, Combine combine) {
  const int lane = threadIdx.x % kernels::kWarpLanes, warp = threadIdx.x / kernels::kWarpLanes;
  const int warps = blockDim.x / kernels::kWarpLanes;
  value = warp_reduce(value, combine);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < warps; ++w) total = combine(total, scratch[w]);
  __syncthreads();  // every thread has read scratch before anyone writes it again
  return total;
}

}  // namespace tripod::cuda
