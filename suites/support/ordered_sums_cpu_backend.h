// The CPU backend with its fp32-accumulated GEMMs summed in index order (k = 0, 1, 2, ...) by a
// plain loop instead of OpenBLAS, for the tests that compare a padding backend with an unpadded
// one bit for bit. A reduction extended by zeros (a zero-padded operand copy, the padded logits'
// columns) then has exactly the bits of the unextended one, whatever kernel OpenBLAS chose for
// this CPU. OpenBLAS's sgemm kernels split a reduction by its length, each CPU's kernel its own way:
// on this project's VM at the time (OpenBLAS 0.3.21 picked its Cooperlake kernels there), 9 of 15 fp32
// products of zero-padded operands kept the unpadded bits; forced to SkylakeX's kernels 12, to
// Haswell's or Prescott's 3 (OPENBLAS_CORETYPE; numpy on the same library, shapes M 64-1024, K
// 37-777). What such a test checks is the model code's use of the padded copies, not OpenBLAS's
// order of sums, so both of its sides use this backend.
// fp64 GEMMs (no copies are made of them) and the TF32 policy stay the CPU backend's.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/bf16.h"

namespace tripod::testing {

class OrderedSumsCpuBackend : public cpu::CpuBackend {
 public:
  OrderedSumsCpuBackend() : cpu::CpuBackend(Device::Host, "cpu") {}

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a, int64_t lda,
            const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc, DType accumulate) override {
    const bool bf16_inputs = a.dtype() == DType::BF16 && b.dtype() == DType::BF16;
    const bool fp32_inputs = a.dtype() == DType::F32 && b.dtype() == DType::F32 && fp32_matmul() != Fp32Matmul::Tf32Operands;
    const bool fp32_or_bf16_c = c.dtype() == DType::F32 || c.dtype() == DType::BF16;
    if (accumulate != DType::F32 || !(bf16_inputs || fp32_inputs) || !fp32_or_bf16_c || m == 0 || n == 0) {
      cpu::CpuBackend::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, accumulate);
      return;
    }
    // As the CPU backend's gemm: fp32 operands rounded to bf16 under that policy, bf16 C rounded once.
    const bool round_operands = fp32_inputs && fp32_matmul() == Fp32Matmul::Bf16Operands;
    const std::vector<float> av = values(a, round_operands), bv = values(b, round_operands);
    std::vector<float> cv = values(c, false);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const float x = av[static_cast<std::size_t>(trans_a ? p * lda + i : i * lda + p)];
          const float y = bv[static_cast<std::size_t>(trans_b ? j * ldb + p : p * ldb + j)];
          sum += x * y;
        }
        float& out = cv[static_cast<std::size_t>(i * ldc + j)];
        // beta 0 never reads C (it may hold NaN), as BLAS's gemm
        out = beta == 0 ? static_cast<float>(alpha) * sum
                        : static_cast<float>(alpha) * sum + static_cast<float>(beta) * out;
      }
    if (c.dtype() == DType::F32) {
      upload(cv.data(), c);
      return;
    }
    std::vector<bf16> rounded(cv.size());
    download(c, rounded.data());  // the gaps between C's rows keep their bits
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const std::size_t at = static_cast<std::size_t>(i * ldc + j);
        rounded[at] = float_to_bf16(cv[at]);
      }
    upload(rounded.data(), c);
  }

 private:
  // Every element of t as fp32 (bf16 widened exactly); fp32 rounded to bf16 and back when asked.
  std::vector<float> values(const Tensor& t, bool round_to_bf16) {
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    if (t.dtype() == DType::BF16) {
      std::vector<bf16> raw(out.size());
      download(t, raw.data());
      for (std::size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_float(raw[i]);
      return out;
    }
    download(t, out.data());
    if (round_to_bf16)
      for (float& x : out) x = bf16_to_float(float_to_bf16(x));
    return out;
  }
};

}  // namespace tripod::testing
