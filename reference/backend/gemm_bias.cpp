// Backend::gemm_bias's and gemm_bias_residual's unfused forms: the GEMM, then the bias added in a
// second pass (and the residual in a third). Backends without a fused product (the CPU and emulated
// ones) run these; the CUDA backend fuses where cuBLASLt's epilogue applies and falls back here
// where it does not.
#include "backend/backend.h"

#include <cstdint>

#include "core/error.h"

namespace tripod {

bool Backend::rounds_fp32_result(const Tensor& c, const Tensor& a, const Tensor& bias) {
  return c.dtype() == DType::BF16 && (a.dtype() == DType::F32 || (bias.defined() && bias.dtype() == DType::F32));
}

void Backend::gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                        const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias, DType accumulate) {
  TRIPOD_CHECK(c.numel() == m * n, "gemm_bias: C (", c.describe(), ") must hold exactly its ", m, " x ", n,
               " elements");
  if (rounds_fp32_result(c, a, bias)) {  // the fp32 result, then its one rounding to bf16
    const Tensor sum = alloc_for_overwrite({m, n}, DType::F32);
    gemm_bias(trans_a, trans_b, m, n, k, a, lda, b, ldb, sum, bias, accumulate);
    convert(sum, c);
    return;
  }
  TRIPOD_CHECK(!bias.defined() || (bias.numel() == n && bias.dtype() == c.dtype()), "gemm_bias: the bias (",
               bias.defined() ? bias.describe() : std::string("none"), ") must be ", n, " elements of C's dtype");
  gemm(trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n, accumulate);
  if (bias.defined()) bias_add(c, bias);
}

void Backend::gemm_bias_residual(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a,
                                 int64_t lda, const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias,
                                 const Tensor& residual, DType accumulate) {
  check_gemm_residual(c, residual, m, n);
  gemm_bias(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, bias, accumulate);
  add(c, c, residual);
}

void Backend::check_gemm_residual(const Tensor& c, const Tensor& residual, int64_t m, int64_t n) const {
  TRIPOD_CHECK(residual.defined() && residual.numel() == m * n && residual.dtype() == c.dtype() &&
                   residual.device() == c.device(),
               "gemm_bias_residual: the residual (", residual.defined() ? residual.describe() : std::string("none"),
               ") must be ", m, " x ", n, " elements of C's dtype where C (", c.describe(), ") is");
  const auto r = reinterpret_cast<std::uintptr_t>(residual.address());
  const auto o = reinterpret_cast<std::uintptr_t>(c.address());
  TRIPOD_CHECK(r + residual.bytes() <= o || o + c.bytes() <= r, "gemm_bias_residual: the residual (",
               residual.describe(), ") shares memory with C (", c.describe(),
               "): C is written before the residual is read");
}

}  // namespace tripod
