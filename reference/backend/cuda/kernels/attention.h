// Causal multi-head attention (attention.cu), the CPU backend's layout: qkv[B,T,3C] with q|k|v,
// head h in columns [h*hd, (h+1)*hd) of each third; out[B,T,C]; probs[B,H,T,T] kept for backward
// (the memory cost the Backend interface states: B*H*T*T elements). The products run on cuBLASLt
// (backend/cuda/host/attention_gemms.h) in T's own precision, true fp32 whatever the backend's fp32
// matmul mode (the CPU backend's attention ignores it too, so the two agree under every policy).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace tripod::cuda {

// Scratch is the caller's, so that the backend's allocator counts it and keeps it from step to step:
// `scratch` holds attention_scratch_elements(...) elements (head-major copies of qkv, out/dout and
// dqkv: 7 * B*T*C), `score_grads` attention_score_grad_elements(...) (the gradient of the scores,
// B*H*T*T, as large as probs).
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, T* scratch, int64_t batch, int64_t seq_len, int64_t channels,
                       int64_t n_head, const CudaContext& ctx);
// Overwrites dqkv.
template <typename T>
void attention_backward(T* dqkv, T* score_grads, T* scratch, const T* dout, const T* qkv, const T* probs,
                        int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head, const CudaContext& ctx);
inline int64_t attention_score_grad_elements(int64_t batch, int64_t seq_len, int64_t n_head) {
  return batch * n_head * seq_len * seq_len;
}
inline int64_t attention_scratch_elements(int64_t batch, int64_t seq_len, int64_t channels) {
  return 7 * batch * seq_len * channels;
}

}  // namespace tripod::cuda
