// The softmax row kernels of the CUDA attention (attention.cu), whose arithmetic is
// backend/kernels/attention_math.h, replayed on the host by suites/unit/test_attention_gemms.cpp:
//   forward   thread i owns columns j = i, i + threads, ... <= t: the block's max, exp(s - max)
//             and the block's sum (softmax_block_reduce.cuh's order), p = e / sum, 0 past t
//             (where the row-blocked score GEMMs wrote nothing, too).
//   backward  row_dot = the block's sum of p_j dp_j (j <= t), then ds_j = softmax_backward_score,
//             0 past t. Each thread rewrites only the columns it read, so in place is safe.
// fp32 rows of whole 16-byte groups take the grouped kernels instead: the same values, each row
// read once into registers, the sums in the grouped order.
// The products read a row's columns only up to the end of its causal row block
// (attention_math.h's causal_block_end): the scratch rows they read (the score gradients, the
// rounded probabilities and score gradients) are written that far and no further, 3/8 of the
// squares' stores fewer at T = 1024; the kept fp32 probs are written whole.
// Included by attention.cu only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/kernels/device_launch.cuh"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/softmax_block_reduce.cuh"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/bf16_math.h"
#include "core/dtype.h"  // bf16 (core/bf16.h, C++20, is host-only)

namespace tripod::cuda::attention_rows {

constexpr int kSoftmaxThreads = kernels::kAttentionSoftmaxThreads;
using kernels::kSoftmaxGroupWidth;
constexpr int kSoftmaxWarps = kSoftmaxThreads / kWarpSize;


// A value as the bf16 operand copy holds it (round to nearest even: bf16_math.h, as the CPU rounds).
template <typename T>
__device__ __forceinline__ bf16 rounded_operand(T x) {
  bf16 out;
  out.bits = kernels::float_to_bf16_bits(static_cast<float>(x));  // T is float wherever a bf16 copy exists
  return out;
}

// probs16 (nullable): the rounded probabilities too, for the bf16 values product, as far as the
// products read them (causal_block_end: the rest of the scratch row is left as it is). The kept
// fp32 probs get the whole row, zeros past the diagonal, as the Backend interface states them.
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_forward_kernel(T* probs, bf16* probs16, int64_t rows, int64_t seq_len, int64_t row_blocks) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;  // keys 0..t
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    T* p = probs + row * seq_len;
    const T row_max =
        block_reduce(kernels::strided_max_partial(p, n, threadIdx.x, kSoftmaxThreads), scratch, kernels::MaxOf{});
    const T denom = block_reduce(kernels::exp_in_place_partial(p, n, row_max, threadIdx.x, kSoftmaxThreads), scratch,
                                 kernels::SumOf{});
    for (int64_t j = threadIdx.x; j < seq_len; j += kSoftmaxThreads) {
      p[j] = j < n ? p[j] / denom : T(0);
      if (probs16 != nullptr && j < read_end) probs16[row * seq_len + j] = rounded_operand(p[j]);
    }
  }
}

// dscores16, probs16 (both null or both set): the rounded score gradients (for dquery, dkey) and
// probabilities (for dvalue), written instead of the fp32 score gradients, which nothing reads then.
// Every output here is the products' scratch: written only as far as they read it (causal_block_end).
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_backward_kernel(T* dscores, const T* probs, bf16* dscores16, bf16* probs16, int64_t rows,
                                   int64_t seq_len, int64_t row_blocks, T scale) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    const T* p = probs + row * seq_len;
    T* ds = dscores + row * seq_len;  // holds dp on entry
    const T row_dot = block_reduce(kernels::strided_dot_partial(p, ds, n, threadIdx.x, kSoftmaxThreads), scratch,
                                   kernels::SumOf{});
    for (int64_t j = threadIdx.x; j < read_end; j += kSoftmaxThreads) {
      const T score = j < n ? kernels::softmax_backward_score(p[j], ds[j], row_dot, scale) : T(0);
      if (dscores16 == nullptr) {
        ds[j] = score;
      } else {  // only the rounded rows are read after this (by dquery, dkey, dvalue): no fp32 store
        dscores16[row * seq_len + j] = rounded_operand(score);
        probs16[row * seq_len + j] = rounded_operand(p[j]);
      }
    }
  }
}

// ---- fp32 rows in registers (attention_math.h's grouped ownership) ----
// The same values as the kernels above, each row read once with 16-byte loads and kept in
// registers: a thread's kGroups groups of 4 columns. Only the groups holding causal columns
// (4g < n) are loaded; the stores cover what the strided kernels store. Their sums run in the
// grouped order, which the host replay follows (test_attention_gemms.cpp).

// x's columns [4g, 4g + 4) rounded to bf16 where below `end` (one 8-byte store for a whole group).
__device__ __forceinline__ void store_bf16_group(bf16* row16, int64_t g, const float (&x)[4], int64_t end) {
  const int64_t j = kSoftmaxGroupWidth * g;
  if (j + kSoftmaxGroupWidth <= end) {
    store4(row16, g, make_float4(x[0], x[1], x[2], x[3]));
  } else {
    for (int e = 0; e < kSoftmaxGroupWidth; ++e)
      if (j + e < end) row16[j + e] = rounded_operand(x[e]);
  }
}

template <int kGroups>
__device__ __forceinline__ void load_causal_groups(float (&v)[4 * kGroups], const float* row, int64_t n) {
  TRIPOD_UNROLL
  for (int q = 0; q < kGroups; ++q) {
    const int64_t g = threadIdx.x + static_cast<int64_t>(q) * kSoftmaxThreads;
    const float4 x = kSoftmaxGroupWidth * g < n ? reinterpret_cast<const float4*>(row)[g] : make_float4(0, 0, 0, 0);
    v[4 * q] = x.x;
    v[4 * q + 1] = x.y;
    v[4 * q + 2] = x.z;
    v[4 * q + 3] = x.w;
  }
}

template <int kGroups>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_forward_grouped_kernel(float* probs, bf16* probs16, int64_t rows, int64_t seq_len,
                                          int64_t row_blocks) {
  constexpr int kSlots = kSoftmaxGroupWidth * kGroups;
  __shared__ float scratch[kSoftmaxWarps];
  const int64_t groups_in_row = seq_len / kSoftmaxGroupWidth;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    float* p = probs + row * seq_len;
    float v[kSlots];
    load_causal_groups<kGroups>(v, p, n);
    const float row_max = block_reduce(kernels::owned_max_partial<float, kSlots>(v, threadIdx.x, kSoftmaxThreads, n),
                                       scratch, kernels::MaxOf{});
    const float denom = block_reduce(
        kernels::owned_exp_in_place_partial<float, kSlots>(v, row_max, threadIdx.x, kSoftmaxThreads, n), scratch,
        kernels::SumOf{});
    TRIPOD_UNROLL
    for (int q = 0; q < kGroups; ++q) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(q) * kSoftmaxThreads;
      if (g >= groups_in_row) continue;
      float x[4];
      TRIPOD_UNROLL
      for (int e = 0; e < 4; ++e) x[e] = kSoftmaxGroupWidth * g + e < n ? v[4 * q + e] / denom : 0.0f;
      reinterpret_cast<float4*>(p)[g] = make_float4(x[0], x[1], x[2], x[3]);
      if (probs16 != nullptr && kSoftmaxGroupWidth * g < read_end)
        store_bf16_group(probs16 + row * seq_len, g, x, read_end);
    }
  }
}

template <int kGroups>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_backward_grouped_kernel(float* dscores, const float* probs, bf16* dscores16, bf16* probs16,
                                           int64_t rows, int64_t seq_len, int64_t row_blocks, float scale) {
  constexpr int kSlots = kSoftmaxGroupWidth * kGroups;
  __shared__ float scratch[kSoftmaxWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    float* ds = dscores + row * seq_len;  // holds dp on entry
    float p[kSlots], dp[kSlots];
    load_causal_groups<kGroups>(p, probs + row * seq_len, n);
    load_causal_groups<kGroups>(dp, ds, n);
    const float row_dot = block_reduce(
        kernels::owned_dot_partial<float, kSlots>(p, dp, threadIdx.x, kSoftmaxThreads, n), scratch, kernels::SumOf{});
    TRIPOD_UNROLL
    for (int q = 0; q < kGroups; ++q) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(q) * kSoftmaxThreads;
      if (kSoftmaxGroupWidth * g >= read_end) continue;
      float score[4], prob[4];
      TRIPOD_UNROLL
      for (int e = 0; e < 4; ++e) {
        const bool inside = kSoftmaxGroupWidth * g + e < n;
        score[e] = inside ? kernels::softmax_backward_score(p[4 * q + e], dp[4 * q + e], row_dot, scale) : 0.0f;
        prob[e] = inside ? p[4 * q + e] : 0.0f;
      }
      if (dscores16 == nullptr) {
        const int64_t j = kSoftmaxGroupWidth * g;
        if (j + kSoftmaxGroupWidth <= read_end) {
          reinterpret_cast<float4*>(ds)[g] = make_float4(score[0], score[1], score[2], score[3]);
        } else {
          for (int e = 0; e < kSoftmaxGroupWidth; ++e)
            if (j + e < read_end) ds[j + e] = score[e];
        }
      } else {
        store_bf16_group(dscores16 + row * seq_len, g, score, read_end);
        store_bf16_group(probs16 + row * seq_len, g, prob, read_end);
      }
    }
  }
}

// Runs `launch(std::integral_constant<int, kGroups>)` for the row's groups a thread (1, 2, 4, 8);
// false where the grouped kernels do not apply (fp64, T % 4 != 0, T > 4096, unaligned buffers).
template <typename T, class Launch>
bool launch_grouped(int64_t seq_len, std::initializer_list<const void*> fp32_buffers,
                    std::initializer_list<const void*> bf16_buffers, const Launch& launch) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    // 16-byte fp32 accesses, 8-byte bf16 stores (null: a buffer the call does not have)
    if (!all_aligned_to(16, fp32_buffers) || !all_aligned_to(8, bf16_buffers)) return false;
    switch (kernels::softmax_groups_per_thread(seq_len, kSoftmaxThreads)) {
      case 1: launch(std::integral_constant<int, 1>{}); return true;
      case 2: launch(std::integral_constant<int, 2>{}); return true;
      case 4: launch(std::integral_constant<int, 4>{}); return true;
      case 8: launch(std::integral_constant<int, 8>{}); return true;
      default: return false;
    }
  }
}


}  // namespace tripod::cuda::attention_rows
