// Deterministic reductions (reductions.cu): no atomics, a fixed tree whose order depends only on
// the size, so a rerun is bit-identical. Results go to device memory (fp64 scalars), never to the
// host. T is float or double unless stated.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"

namespace tripod::cuda {

// *acc += sum of x^2, accumulated in fp64.
template <typename T>
void sum_squares(double* acc, const T* x, int64_t n, const CudaContext& ctx);
// *acc += the number of infinite or NaN elements.
template <typename T>  // float, double, bf16
void count_nonfinite(double* acc, const T* x, int64_t n, const CudaContext& ctx);
// *out = sum of losses[i] over targets[i] >= 0, in fp64.
template <typename T>
void sum_valid_losses(double* out, const T* losses, const int32_t* targets, int64_t n, const CudaContext& ctx);
// dbias[c] += sum over rows of dout[row, c], rows summed in a fixed order.
template <typename T>
void bias_grad(T* dbias, const T* dout, int64_t rows, int64_t channels, const CudaContext& ctx);
// bias_grad<float>'s sums, added in its order (the same bits), and copy = dout rounded to bf16
// (convert's rounding), in one pass over dout [rows, channels]: a linear layer's output gradient
// under bf16-mixed is read once for its bias gradient and its GEMM operand, not twice.
void bias_grad_and_bf16_copy(float* dbias, bf16* copy, const float* dout, int64_t rows, int64_t channels,
                             const CudaContext& ctx);
// The same for the gradient d = gelu_backward(inp, dout) of a GELU's input, d computed where it is
// read and never stored (the bits of gelu_backward then bias_grad_and_bf16_copy); inp fp32 or bf16
// (bf16-mixed's pre-activation), dout fp32 or, with a bf16 inp, bf16 (bf16-mixed's gradient of gelu(fc)).
template <typename In, typename DOut>
void gelu_backward_bias_grad_and_bf16_copy(float* dbias, bf16* copy, const In* inp, const DOut* dout, int64_t rows,
                                           int64_t channels, const CudaContext& ctx);
// The same for a token-major gradient [B*T, parts*C] that exists only in head-major form
// [parts][B][H][T][hd] (the GEMM attention's backward, attention.cu): read by token rows through
// attention_math.h's head_major_index, summed and rounded into the token-major bf16 copy (the bits
// of copying it to token-major fp32, then bias_grad_and_bf16_copy).
void head_major_bias_grad_and_bf16_copy(float* dbias, bf16* copy, const float* head_major, int64_t batch,
                                        int64_t seq_len, int64_t n_head, int64_t head_dim, int64_t parts,
                                        const CudaContext& ctx);

}  // namespace tripod::cuda
