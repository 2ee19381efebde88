// Elementwise CUDA kernels (elementwise.cu): the CPU backend's kernels (backend/cpu/kernels.h) on
// device pointers, element for element the same arithmetic (backend/kernels/elementwise_math.h),
// issued on ctx.stream. T is float or double unless stated.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"

namespace tripod::cuda {

template <typename T>  // float, double, bf16
void fill(T* x, int64_t n, double value, const CudaContext& ctx);
// fp32 <-> fp64 <-> bf16, round to nearest even (core/bf16.h's rules, fp64 -> bf16 via round-to-odd).
template <typename From, typename To>
void convert(const From* src, To* dst, int64_t n, const CudaContext& ctx);
// The same over a [rows, cols] matrix between leading dimensions (From == To: a strided copy),
// into dst [rows_dst, cols_dst] (rows_dst >= rows, ld_dst >= cols_dst >= cols): dst[r, c] = src[r, c]
// inside [rows, cols], 0 in the rest of dst's [rows_dst, cols_dst] (zero padding); columns past
// cols_dst are left as they are. rows_dst = rows, cols_dst = cols: an exact copy.
template <typename From, typename To>
void convert_2d(const From* src, int64_t ld_src, int64_t rows, int64_t cols, To* dst, int64_t ld_dst,
                int64_t rows_dst, int64_t cols_dst, const CudaContext& ctx);
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n, const CudaContext& ctx);  // out may alias a or b
template <typename T>
void scale(T* x, int64_t n, double factor, const CudaContext& ctx);
template <typename T>
void bias_add(T* out, const T* bias, int64_t rows, int64_t channels, const CudaContext& ctx);
// packed[r, :] = table[ids[r], :] and table[ids[r], :] += packed[r, :] (ids distinct), [rows, C].
template <typename T>
void gather_rows(T* packed, const T* table, const int32_t* ids, int64_t rows, int64_t channels, const CudaContext& ctx);
template <typename T>
void scatter_add_rows(T* table, const T* packed, const int32_t* ids, int64_t rows, int64_t channels,
                      const CudaContext& ctx);
// The GELU of an input of T, or of bf16 into fp32 (bf16-mixed's pre-activation, and for the
// backward its bf16 output gradient too: the bits of the same call on their exactly widened values).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, const CudaContext& ctx);
void gelu_forward(float* out, const bf16* inp, int64_t n, const CudaContext& ctx);
// out = bf16(gelu(inp)), the bits of gelu_forward then convert (fp32 or bf16 in, no fp32 out).
template <typename In>
void gelu_to_bf16(bf16* out, const In* inp, int64_t n, const CudaContext& ctx);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, const CudaContext& ctx);
void gelu_backward(float* dinp, const bf16* inp, const float* dout, int64_t n, const CudaContext& ctx);
void gelu_backward(float* dinp, const bf16* inp, const bf16* dout, int64_t n, const CudaContext& ctx);
template <typename T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1, double beta2, double eps,
           double weight_decay, int64_t step, double grad_scale, const CudaContext& ctx);

}  // namespace tripod::cuda
