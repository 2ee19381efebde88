// LayerNorm forward and backward (layernorm.cu), statistics in fp32 for fp32 (fp64 for fp64);
// dweight and dbias summed over rows in a fixed order (no atomics).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"

namespace tripod::cuda {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t rows,
                       int64_t channels, double eps, const CudaContext& ctx);
// Accumulates into dinp, dweight, dbias.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t rows, int64_t channels, const CudaContext& ctx);

}  // namespace tripod::cuda
