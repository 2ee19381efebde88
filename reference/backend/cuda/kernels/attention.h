// Causal multi-head attention (attention.cu), the CPU backend's layout: qkv[B,T,3C] with q|k|v,
// head h in columns [h*hd, (h+1)*hd) of each third; out[B,T,C]; probs[B,H,T,T] kept for backward
// (the memory cost the Backend interface states: B*H*T*T elements). The products run on cuBLASLt
// (backend/cuda/host/attention_gemms.h) in T's own precision, true fp32, or, for fp32 tensors under
// the bf16-operand policy (a `scratch16` given), on bf16 operands rounded where the CPU backend's
// attention rounds them (attention.cu says where), with fp32 accumulation and results.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"  // bf16 (core/bf16.h, C++20, is host-only)

namespace tripod::cuda {

// Scratch is the caller's, so that the backend's allocator counts it and keeps it from step to step:
// `scratch` holds attention_scratch_elements(...) elements (head-major copies of qkv, out/dout and
// dqkv: 7 * B*T*C), `score_grads` attention_score_grad_elements(...) (the gradient of the scores,
// B*H*T*T, as large as probs), `scratch16` (null: products in T) attention_bf16_scratch_elements(...).
// `out16` (T = float with scratch16 only): out is written there, rounded to bf16 (the GEMM operand's
// copy, Backend::attention_operand), instead of into `out`, which may then be null.
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, T* scratch, bf16* scratch16, int64_t batch, int64_t seq_len,
                       int64_t channels, int64_t n_head, const CudaContext& ctx, bf16* out16 = nullptr);
// Overwrites dqkv. `dqkv16` (fp32 with bf16 operands only; dqkv then unused, may be null): dqkv
// written only as its bf16 copy [B*T, 3C], with dbias[3C] += its column sums, in the pass that
// would have copied it to token-major rows (reductions.h: head_major_bias_grad_and_bf16_copy).
template <typename T>
void attention_backward(T* dqkv, T* score_grads, T* scratch, bf16* scratch16, const T* dout, const T* qkv,
                        const T* probs, int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                        const CudaContext& ctx, bf16* dqkv16 = nullptr, float* dbias = nullptr);
inline int64_t attention_score_grad_elements(int64_t batch, int64_t seq_len, int64_t n_head) {
  return batch * n_head * seq_len * seq_len;
}
inline int64_t attention_scratch_elements(int64_t batch, int64_t seq_len, int64_t channels) {
  return 7 * batch * seq_len * channels;
}
// The bf16 operand copies: qkv and dout head-major (4 * B*T*C), the rounded probabilities and score
// gradients (2 * B*H*T*T; GPT-2 124M at B8 x T1024: 384 MiB, the size of one fp32 probs).
inline int64_t attention_bf16_scratch_elements(int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head) {
  return 4 * batch * seq_len * channels + 2 * attention_score_grad_elements(batch, seq_len, n_head);
}

}  // namespace tripod::cuda
