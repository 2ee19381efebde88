// Causal attention's matrix products as strided-batched GEMMs, as pure host functions: the CUDA
// backend (backend/cuda/kernels/attention.cu) hands each to cuBLASLt, and
// suites/unit/test_attention_gemms.cpp runs the same calls through a column-major reference GEMM
// with the softmax rows replayed, against the CPU backend's attention.
//
// Layout (the CPU backend's): qkv[B,T,3C] holds q | k | v, head h in columns [h*hd, (h+1)*hd) of
// each third (hd = C / H), so head h of batch row b is a [T, hd] matrix with leading dimension 3C;
// out and dout [B,T,C] (ld C); probs and the score gradients [B,H,T,T].
//
// One call per head h, batched over b: matrix b of a batch starts T*3C elements after matrix b-1
// in qkv, T*C in out/dout, H*T*T in the [B,H,T,T] buffers, so the batch's C matrices never
// interleave (each call writes whole [T, *] blocks apart from the others'). H calls a product.
//
//   forward   scores  S = scale * Q K^T   [T,T] per (b,h), written to probs, then softmax in place
//             values  O = P V             [T,hd] into out
//   backward  dprobs  dP = dO V^T         [T,T] into the score-gradient buffer, then in place
//                                          dS = P * (dP - rowsum(P * dP)) * scale (zero past t)
//             dquery  dQ = dS K           [T,hd] into dqkv's q third
//             dkey    dK = dS^T Q         into the k third
//             dvalue  dV = P^T dO         into the v third
// Every product runs over all T keys; the masked ones contribute exact zeros (P and dS are 0
// past the diagonal), so the causal half is computed and discarded, at twice the minimal FLOPs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/host/gemm_layout.h"

namespace tripod::cuda {

struct AttentionDims {
  int64_t batch = 0, seq_len = 0, channels = 0, n_head = 0;
  int64_t head_dim() const { return channels / n_head; }
};

// Validates the sizes (all >= 0, heads > 0, C divisible by H), naming `op` on failure.
AttentionDims checked_attention_dims(const char* op, int64_t batch, int64_t seq_len, int64_t channels,
                                     int64_t n_head);

// The products of head h; pointers are the tensors' first elements, `element_bytes` their
// element size (all share one dtype), `scale` 1/sqrt(hd) in the tensors' dtype.
RowMajorGemm attention_scores_gemm(const AttentionDims& d, int64_t h, const void* qkv, void* probs,
                                   std::size_t element_bytes, double scale);
RowMajorGemm attention_values_gemm(const AttentionDims& d, int64_t h, const void* probs, const void* qkv, void* out,
                                   std::size_t element_bytes);
RowMajorGemm attention_dprobs_gemm(const AttentionDims& d, int64_t h, const void* dout, const void* qkv,
                                   void* score_grads, std::size_t element_bytes);
RowMajorGemm attention_dquery_gemm(const AttentionDims& d, int64_t h, const void* score_grads, const void* qkv,
                                   void* dqkv, std::size_t element_bytes);
RowMajorGemm attention_dkey_gemm(const AttentionDims& d, int64_t h, const void* score_grads, const void* qkv,
                                 void* dqkv, std::size_t element_bytes);
RowMajorGemm attention_dvalue_gemm(const AttentionDims& d, int64_t h, const void* probs, const void* dout,
                                   void* dqkv, std::size_t element_bytes);

}  // namespace tripod::cuda
