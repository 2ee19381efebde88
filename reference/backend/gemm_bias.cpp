// Backend::gemm_bias's unfused form: the GEMM, then the bias added in a second pass. Backends
// without a fused product (the CPU and emulated ones) run this; the CUDA backend fuses where
// cuBLASLt's bias epilogue applies and falls back here where it does not.
#include "backend/backend.h"
#include "core/error.h"

namespace tripod {

void Backend::gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a, int64_t lda,
                        const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias, DType accumulate) {
  check(c.numel() == m * n, "gemm_bias: C (", c.describe(), ") must hold exactly its ", m, " x ", n, " elements");
  check(!bias.defined() || (bias.numel() == n && bias.dtype() == c.dtype()), "gemm_bias: the bias (",
        bias.defined() ? bias.describe() : std::string("none"), ") must be ", n, " elements of C's dtype");
  gemm(trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n, accumulate);
  if (bias.defined()) bias_add(c, bias);
}

}  // namespace tripod
