// Token and position embeddings (embedding.cu), forward and a deterministic backward: no atomics;
// threads run over channels and each sums its tokens in token order, as the CPU backend does, so
// results are bit-identical to it. Ids are checked on the host before upload (backend.h); a kernel
// given an id outside the table reads nothing and leaves its row zero.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace tripod::cuda {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t n_tokens, int64_t seq_len,
                       int64_t channels, int64_t vocab, const CudaContext& ctx);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens, int64_t seq_len,
                        int64_t channels, int64_t vocab, const CudaContext& ctx);
template <typename T>
void embedding_lookup_window(T* out, const int32_t* tokens, const T* wte, int64_t n_tokens, int64_t channels,
                             int64_t start, int64_t valid, const CudaContext& ctx);
template <typename T>
void position_add(T* out, const T* wpe, int64_t rows, int64_t channels, int64_t first_token, int64_t seq_len,
                  const CudaContext& ctx);
template <typename T>
void embedding_backward_window(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                               int64_t channels, int64_t start, int64_t valid, int64_t seq_len, const CudaContext& ctx);

}  // namespace tripod::cuda
