// The Backend's GEMM on a CUDA device through cuBLASLt (cublaslt_gemm.cpp): row-major operands
// mapped to cuBLASLt's column-major ones by backend/cuda/host/gemm_layout.h (a pure, unit-tested
// host function). Combinations as backend.h states: fp32 (CUBLAS_COMPUTE_32F; TF32 only when
// fp32_on_tf32), fp64, bf16 A/B with fp32 accumulation and an fp32 or bf16 C.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/host/gemm_layout.h"
#include "core/dtype.h"
#include "core/error.h"

namespace tripod::cuda {

struct NoAlgorithmWithSeparateC : Error {
  using Error::Error;
};
// A bf16 C's bias epilogue that cuBLASLt does not run (no algorithm, or the call refused): thrown
// before anything is written, since a product already rounded to bf16 cannot take the bias with
// the bits of the fp32 sum; the caller computes it in fp32 and converts.
struct NoBf16BiasEpilogue : Error {
  using Error::Error;
};

// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C (row-major, leading dimensions in elements).
// With `bias` (nullable; fp32 [n], for an fp32 C): + bias[j] on every row, through cuBLASLt's bias
// epilogue, in fp32 after the product (the bits of a separate addition) where cuBLASLt offers an
// algorithm with it and the bias is 16-byte aligned. Returns whether the bias was added. For a
// bf16 C (alpha 1, beta 0): the fp32 sum rounded once, or NoBf16BiasEpilogue where cuBLASLt has no
// such algorithm (an fp32 bias into a bf16 D is not among cublasLt.h's documented pairs: the first
// GPU run says whether this cuBLASLt takes it).
// With `c_in` (nullable; only where k > 0): beta * C is read from c_in, laid out as c, and the
// result written to c (cuBLASLt's C and D apart: a residual added in the epilogue); a bias then
// rides on the epilogue with beta != 0 too, summed before the one rounding. Where cuBLASLt has no
// algorithm for that, NoAlgorithmWithSeparateC is thrown before anything is written.
bool gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, DType ab, double beta, void* c, int64_t ldc, DType c_dtype, DType accumulate,
          bool fp32_on_tf32, const CudaContext& ctx, const float* bias = nullptr, const void* c_in = nullptr);

// The same for a call described whole, a strided batch included (gemm_layout.h): one cuBLASLt
// call for the batch (a bias only without one). The element sizes must be those of `ab` and `c_dtype`.
bool gemm(const RowMajorGemm& call, DType ab, DType c_dtype, DType accumulate, bool fp32_on_tf32,
          const CudaContext& ctx, const float* bias = nullptr, const void* c_in = nullptr);

}  // namespace tripod::cuda
