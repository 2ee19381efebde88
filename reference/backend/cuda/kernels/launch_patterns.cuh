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
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/kernels/device_launch.cuh"
#include "backend/kernels/bf16_math.h"
#include "core/dtype.h"  // bf16 (core/bf16.h, C++20, is host-only)

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

// fp32 elementwise work four elements a thread: group g is elements [4g, 4g + 4), read and written
// with 16-byte accesses (a thread per element moves 4 bytes an access, and the measured kernels
// reached 46-71 % of the device's copy rate). The op's scalar function gives every value, so the
// bits are the one-element kernel's. A QuadOp provides  __device__ void quad(int64_t g) const  for
// a whole group and operator()(int64_t i) for the elements of a partial last group.
template <class QuadOp>
struct FourElementGroups {
  QuadOp op;
  int64_t n;
  __device__ void operator()(int64_t g) const {
    if (4 * g + 4 <= n) {
      op.quad(g);
    } else {
      for (int64_t i = 4 * g; i < n; ++i) op(i);
    }
  }
};

__device__ __forceinline__ float4 load4(const float* p, int64_t g) { return reinterpret_cast<const float4*>(p)[g]; }
__device__ __forceinline__ void store4(float* p, int64_t g, float4 v) { reinterpret_cast<float4*>(p)[g] = v; }
// Group g of a bf16 tensor widened exactly to fp32, one 8-byte load (element 4g in the low half of
// the first word, as float_pair_to_bf16_word packs it).
__device__ __forceinline__ float4 load4(const bf16* p, int64_t g) {
  const uint2 w = reinterpret_cast<const uint2*>(p)[g];
  return make_float4(kernels::bf16_bits_to_float(static_cast<uint16_t>(w.x & 0xFFFFu)),
                     kernels::bf16_bits_to_float(static_cast<uint16_t>(w.x >> 16)),
                     kernels::bf16_bits_to_float(static_cast<uint16_t>(w.y & 0xFFFFu)),
                     kernels::bf16_bits_to_float(static_cast<uint16_t>(w.y >> 16)));
}
// Group g of a bf16 tensor: v rounded to nearest even (bf16_math.h, as the CPU rounds), one 8-byte store.
__device__ __forceinline__ void store4(bf16* p, int64_t g, float4 v) {
  reinterpret_cast<uint2*>(p)[g] =
      make_uint2(kernels::float_pair_to_bf16_word(v.x, v.y), kernels::float_pair_to_bf16_word(v.z, v.w));
}

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }
// Every pointer that is not null aligned to `bytes`: what a kernel's wide accesses need.
inline bool all_aligned_to(std::size_t bytes, std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p != nullptr && !aligned_to(p, bytes)) return false;
  return true;
}

// `op` over [0, n): four elements a thread where `wide` (the caller's pointers allow its quad's
// wide accesses), else a thread per element.
template <class QuadOp>
void launch_elementwise_in_fours_if(bool wide, const QuadOp& op, int64_t n, const CudaContext& ctx,
                                    const char* kernel_name) {
  if (wide) return launch_elementwise(FourElementGroups<QuadOp>{op, n}, (n + 3) / 4, ctx, kernel_name);
  launch_elementwise(op, n, ctx, kernel_name);
}

// `op` over [0, n): four elements a thread where T is float and every pointer in `pointers` is
// 16-byte aligned (float4 accesses need it), else a thread per element.
template <typename T, class QuadOp>
void launch_elementwise_in_fours(const QuadOp& op, int64_t n, std::initializer_list<const void*> pointers,
                                 const CudaContext& ctx, const char* kernel_name) {
  if constexpr (std::is_same_v<T, float>) {
    if (all_aligned_to(16, pointers)) return launch_elementwise_in_fours_if(true, op, n, ctx, kernel_name);
  }
  launch_elementwise(op, n, ctx, kernel_name);
}

}  // namespace tripod::cuda
