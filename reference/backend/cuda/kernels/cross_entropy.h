// Softmax cross-entropy (cross_entropy.cu), whole-vocabulary and over a window of it (a
// vocab-parallel rank's columns), with the CPU backend's semantics (backend/backend.h): targets
// < 0 are ignored (loss 0, zero gradient row), padding columns never enter a softmax.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"  // bf16

namespace tripod::cuda {

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           const CudaContext& ctx);
template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, int64_t rows, int64_t vocab, double grad_scale,
                            const CudaContext& ctx);
template <typename T>
void logits_row_max(T* row_max, const T* logits, int64_t rows, int64_t cols, int64_t valid, const CudaContext& ctx);
template <typename T>
void logits_exp_sums(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t rows, int64_t cols,
                     int64_t start, int64_t valid, const CudaContext& ctx);
// logits_row_max and logits_exp_sums in one pass over the logits (an online max and sum; the sums
// equal the two passes' up to rounding).
template <typename T>
void logits_stats(T* row_max, T* sums, const T* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  int64_t start, int64_t valid, const CudaContext& ctx);
template <typename T>
void cross_entropy_from_sums(T* losses, T* logsumexp, const T* row_max, const T* sums, const int32_t* targets,
                             int64_t rows, const CudaContext& ctx);
template <typename T>
void cross_entropy_backward_window(T* logits, const T* logsumexp, const int32_t* targets, int64_t rows, int64_t cols,
                                   int64_t start, int64_t valid, double grad_scale, const CudaContext& ctx);
// bf16-mixed's bf16 logits: fp32 statistics of their values; the gradient in place, computed in
// fp32 and rounded once (the bits of the fp32 logits' gradient then convert, on these values).
void logits_row_max(float* row_max, const bf16* logits, int64_t rows, int64_t cols, int64_t valid,
                    const CudaContext& ctx);
void logits_exp_sums(float* sums, const bf16* logits, const float* row_max, const int32_t* targets, int64_t rows,
                     int64_t cols, int64_t start, int64_t valid, const CudaContext& ctx);
void logits_stats(float* row_max, float* sums, const bf16* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  int64_t start, int64_t valid, const CudaContext& ctx);
void cross_entropy_backward_window(bf16* logits, const float* logsumexp, const int32_t* targets, int64_t rows,
                                   int64_t cols, int64_t start, int64_t valid, double grad_scale,
                                   const CudaContext& ctx);
// A training forward's losses and, in place, the gradient over the whole vocabulary [0, vocab) of
// rows of `cols` (padding past): logits_stats, cross_entropy_from_sums and
// cross_entropy_backward_window in one kernel, with their bits, each row read once from memory.
// L: T, or bf16 with T float.
template <typename T, typename L>
void cross_entropy_with_gradient(T* losses, L* logits, const int32_t* targets, int64_t rows, int64_t cols,
                                 int64_t vocab, double grad_scale, const CudaContext& ctx);
// The same gradient rounded to bf16 into `out` [rows, cols] (its GEMM operand: the bits of the
// in-place gradient then convert), the logits left as they are.
void cross_entropy_backward_window_to_bf16(bf16* out, const float* logits, const float* logsumexp,
                                           const int32_t* targets, int64_t rows, int64_t cols, int64_t start,
                                           int64_t valid, double grad_scale, const CudaContext& ctx);

}  // namespace tripod::cuda
