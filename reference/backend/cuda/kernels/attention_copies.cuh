// The head-major copies of the CUDA attention (attention.cu): qkv and dout into
// [parts][B*H][T][hd] (rounded to bf16 as they are copied for the bf16 operands), and the results
// back to token-major [B*T][parts * C]. The index functions are attention_math.h's, tested on the
// host (test_attention_gemms.cpp). Included by attention.cu only.
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/host/attention_gemms.h"
#include "backend/cuda/kernels/attention_rows.cuh"
#include "backend/cuda/kernels/launch_patterns.cuh"

namespace tripod::cuda::attention_copies {

using attention_rows::rounded_operand;

// Head-major copies (attention_math.h's token_major_index), either way: a warp per head_dim-long
// row of the head-major tensor, contiguous in both layouts, so the index arithmetic (five 64-bit
// divisions) runs once a row, not once an element (measured on an H200: per element, the copies
// moved 0.9 TB/s). One writer per element.
template <typename From, typename To>
struct HeadMajorRowCopy {
  To* dst;
  const From* src;
  int64_t batch, seq_len, n_head, head_dim, parts;
  bool to_head_major;
  __device__ void operator()(int64_t row, int lane) const {
    // Row r's first element: token_major_index(r * head_dim) = head_dim * token_major_index(r) of
    // rows one element long (a constant 1 the compiler folds: one division fewer).
    const int64_t head_major = row * head_dim;
    const int64_t token_major = head_dim * kernels::token_major_index(row, batch, seq_len, n_head, 1, parts);
    for (int64_t e = lane; e < head_dim; e += kWarpSize) {
      if (to_head_major) dst[head_major + e] = element(src[token_major + e]);
      else dst[token_major + e] = element(src[head_major + e]);
    }
  }
  __device__ __forceinline__ To element(From x) const {
    if constexpr (std::is_same_v<To, bf16>) return rounded_operand(x);
    else return x;
  }
};

// The same copies a warp per token row (b, t) of the token-major tensor, its parts * C columns
// in groups of four: 16-byte loads and stores on the fp32 side, 8-byte ones on the bf16 side, the
// head-major place of a group by attention_math.h's head_major_index (every row's stores are
// whole 64-element head rows, 16 lanes each). Needs hd % 4 == 0 and both tensors 16-byte aligned
// (measured on an H200, the head-row copies above moved 1.4 TB/s).
template <typename From, typename To>
struct TokenRowGroupCopy {
  To* dst;
  const From* src;
  int64_t batch, seq_len, n_head, head_dim, parts;
  bool to_head_major;
  __device__ void operator()(int64_t token_row, int lane) const {
    const int64_t groups = parts * n_head * head_dim / 4;
    for (int64_t g = lane; g < groups; g += kWarpSize) {
      const int64_t token_major = token_row * groups * 4 + 4 * g;
      const int64_t head_major = kernels::head_major_index(token_row, 4 * g, batch, seq_len, n_head, head_dim);
      if (to_head_major) store4(dst + head_major, 0, load4(src + token_major, 0));
      else store4(dst + token_major, 0, load4(src + head_major, 0));
    }
  }
};

template <typename From, typename To>
void copy_head_major(To* dst, const From* src, const AttentionDims& d, int64_t parts, bool to_head_major,
                     const CudaContext& ctx) {
  const char* name = to_head_major ? "attention (to head-major)" : "attention (to token-major)";
  if constexpr (std::is_same_v<From, float>) {
    if (d.head_dim() % 4 == 0 && all_aligned_to(16, {dst, src})) {
      launch_warp_rows(TokenRowGroupCopy<From, To>{dst, src, d.batch, d.seq_len, d.n_head, d.head_dim(), parts,
                                                   to_head_major},
                       d.batch * d.seq_len, ctx, name);
      return;
    }
  }
  launch_warp_rows(
      HeadMajorRowCopy<From, To>{dst, src, d.batch, d.seq_len, d.n_head, d.head_dim(), parts, to_head_major},
      parts * attention_head_major_elements(d) / d.head_dim(), ctx, name);
}
template <typename From, typename To>  // To: From's type, or bf16 (the operand copies)
void copy_to_head_major(To* dst, const From* src, const AttentionDims& d, int64_t parts, const CudaContext& ctx) {
  copy_head_major(dst, src, d, parts, true, ctx);
}
template <typename T>
void copy_to_token_major(T* dst, const T* src, const AttentionDims& d, int64_t parts, const CudaContext& ctx) {
  copy_head_major(dst, src, d, parts, false, ctx);
}


}  // namespace tripod::cuda::attention_copies
