// Causal multi-head attention (attention.cu), the CPU backend's layout: qkv[B,T,3C] with q|k|v,
// head h in columns [h*hd, (h+1)*hd) of each third; out[B,T,C]; probs[B,H,T,T] kept for backward
// (the memory cost the Backend interface states: B*H*T*T elements). The products run on cuBLASLt
// (backend/cuda/host/attention_gemms.h) in T's own precision, true fp32 whatever the backend's fp32
// matmul mode (the CPU backend's attention ignores it too, so the two agree under every policy).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace tripod::cuda {

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t batch, int64_t seq_len, int64_t channels,
                       int64_t n_head, const CudaContext& ctx);
// Overwrites dqkv. `score_grads` is scratch of attention_score_grad_elements(...) elements (the
// gradient of the scores, B*H*T*T, as large as probs): the caller provides it, so that the
// backend's allocator counts it and keeps it from step to step.
template <typename T>
void attention_backward(T* dqkv, T* score_grads, const T* dout, const T* qkv, const T* probs, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t n_head, const CudaContext& ctx);
inline int64_t attention_score_grad_elements(int64_t batch, int64_t seq_len, int64_t n_head) {
  return batch * n_head * seq_len * seq_len;
}

}  // namespace tripod::cuda
