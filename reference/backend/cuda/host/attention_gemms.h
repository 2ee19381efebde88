// Causal attention's matrix products as strided-batched GEMMs, as pure host functions: the CUDA
// backend (backend/cuda/kernels/attention.cu) hands each to cuBLASLt, and
// suites/unit/test_attention_gemms.cpp runs the same calls through a column-major reference GEMM
// with the softmax rows replayed, against the CPU backend's attention.
//
// Operands, head-major (attention.cu copies qkv and dout into this layout first, and the results
// back; backend/kernels/attention_math.h's head_major_source gives the correspondence):
//   qkvh  [3][B*H][T][hd]  q, k, v: matrix (b, h) of each is [T, hd], leading dimension hd
//   outh, douth  [B*H][T][hd];  dqkvh  [3][B*H][T][hd]
//   probs, score gradients  [B*H][T][T]
// so every product is ONE call batched over all B*H pairs with uniform strides.
//
// The causal structure, by query row blocks: rows are split into `row_blocks` blocks
// [begin(r), begin(r + 1)); row t only sees keys j <= t, so block r's products stop at key
// begin(r + 1) instead of T. With R blocks the products cover (R + 1) / 2R of the T x T square
// (R = 4: 62.5 %) instead of all of it, for R calls a product.
//   forward   scores  S[r, :end] = scale * Q[r] K[:end]^T   then the softmax rows, in place, which
//                     read only j <= t and write exact zeros past t (also where no GEMM wrote)
//             values  O[r] = P[r, :end] V[:end]
//   backward  dprobs  dP[r, :end] = dO[r] V[:end]^T        then dS in place (zero past t)
//             dquery  dQ[r] = dS[r, :end] K[:end]
//             dkey    dK[c] = dS[begin(c):, c]^T Q[begin(c):]   (key block c: rows t >= its first key)
//             dvalue  dV[c] = P[begin(c):, c]^T dO[begin(c):]
// where r (c) also names the rows (keys) [begin(r), begin(r + 1)) and :end stops at begin(r + 1).
// Inside a diagonal block the products still touch j > t; P and dS are exact zeros there.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/host/gemm_layout.h"
#include "backend/kernels/attention_math.h"

namespace tripod::cuda {

struct AttentionDims {
  int64_t batch = 0, seq_len = 0, channels = 0, n_head = 0;
  int64_t row_blocks = 1;
  int64_t head_dim() const { return channels / n_head; }
  int64_t pairs() const { return batch * n_head; }
  int64_t block_begin(int64_t r) const { return kernels::causal_block_begin(r, seq_len, row_blocks); }
};

// The row blocks the backend uses for a sequence length: 1 up to T = 255, then one per 256 rows,
// at most 4 (fewer, larger calls for short sequences; past 4 the saving grows slowly while the
// calls keep multiplying).
int64_t attention_row_blocks(int64_t seq_len);

// Validates the sizes (all >= 0, heads > 0, C divisible by H), naming `op` on failure; row_blocks
// from attention_row_blocks.
AttentionDims checked_attention_dims(const char* op, int64_t batch, int64_t seq_len, int64_t channels,
                                     int64_t n_head);

// Elements of the head-major copies the backend keeps (attention.cu): qkvh and dqkvh are three
// times this, outh and douth once.
inline int64_t attention_head_major_elements(const AttentionDims& d) { return d.batch * d.seq_len * d.channels; }

// The products of query row block r (scores, values, dprobs, dquery) or key block c (dkey,
// dvalue); pointers are the buffers' first elements. `bytes`: the element sizes of the operands A
// and B (they share a dtype: fp32 or fp64 as the tensors, bf16 under the bf16-operand policy) and of
// the fp32/fp64 result C; `scale` 1/sqrt(hd) in the tensors' dtype.
struct AttentionBytes {
  std::size_t operands = 0, result = 0;
};
RowMajorGemm attention_scores_gemm(const AttentionDims& d, int64_t r, const void* qkvh, void* probs,
                                   AttentionBytes bytes, double scale);
RowMajorGemm attention_values_gemm(const AttentionDims& d, int64_t r, const void* probs, const void* qkvh, void* outh,
                                   AttentionBytes bytes);
RowMajorGemm attention_dprobs_gemm(const AttentionDims& d, int64_t r, const void* douth, const void* qkvh,
                                   void* score_grads, AttentionBytes bytes);
RowMajorGemm attention_dquery_gemm(const AttentionDims& d, int64_t r, const void* score_grads, const void* qkvh,
                                   void* dqkvh, AttentionBytes bytes);
RowMajorGemm attention_dkey_gemm(const AttentionDims& d, int64_t c, const void* score_grads, const void* qkvh,
                                 void* dqkvh, AttentionBytes bytes);
RowMajorGemm attention_dvalue_gemm(const AttentionDims& d, int64_t c, const void* probs, const void* douth,
                                   void* dqkvh, AttentionBytes bytes);

}  // namespace tripod::cuda
