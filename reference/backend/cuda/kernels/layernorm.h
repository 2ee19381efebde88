// LayerNorm forward and backward (layernorm.cu), statistics in fp32 for fp32 (fp64 for fp64);
// dweight and dbias summed over rows in a fixed order (no atomics).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "core/dtype.h"  // bf16

namespace tripod::cuda {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t rows,
                       int64_t channels, double eps, const CudaContext& ctx);
// layernorm_forward<float> with out rounded to bf16 as it is stored (the bits of layernorm_forward
// then convert): a GEMM operand's copy without the fp32 output.
void layernorm_forward_to_bf16(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                               const float* bias, int64_t rows, int64_t channels, double eps, const CudaContext& ctx);
// Accumulates into dinp, dweight, dbias. `fused_sums`: dweight and dbias summed in dinp's pass
// (where the partials fit in shared memory), else in a second pass over dout and inp.
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t rows, int64_t channels, bool fused_sums, const CudaContext& ctx);

}  // namespace tripod::cuda
