// The Backend's GEMM on a CUDA device through cuBLASLt (cublaslt_gemm.cpp): row-major operands
// mapped to cuBLASLt's column-major ones by backend/cuda/host/gemm_layout.h (a pure, unit-tested
// host function). Combinations as backend.h states: fp32 (CUBLAS_COMPUTE_32F; TF32 only when
// fp32_on_tf32), fp64, bf16 A/B with fp32 accumulation and an fp32 or bf16 C.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/host/gemm_layout.h"
#include "core/dtype.h"

namespace tripod::cuda {

// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C (row-major, leading dimensions in elements).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, DType ab, double beta, void* c, int64_t ldc, DType c_dtype, DType accumulate,
          bool fp32_on_tf32, const CudaContext& ctx);

// The same for a call described whole, a strided batch included (gemm_layout.h): one cuBLASLt
// call for the batch. The element sizes must be those of `ab` and `c_dtype`.
void gemm(const RowMajorGemm& call, DType ab, DType c_dtype, DType accumulate, bool fp32_on_tf32,
          const CudaContext& ctx);

}  // namespace tripod::cuda
