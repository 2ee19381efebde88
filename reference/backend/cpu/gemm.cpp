#include <cblas.h>

#include <bit>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/bf16.h"

namespace tripod::cpu {

template <>
void gemm<float>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda),
              b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                  int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda),
              b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace tripod::cpu

namespace tripod::cpu {
namespace {

// The elements a row-major matrix of `rows` x `cols` with leading dimension `ld` spans.
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; }

std::vector<float> widen(const bf16* x, int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  convert<bf16, float>(x, out.data(), n);
  return out;
}

// x rounded to TF32: to nearest, ties to even, at fp32's 13th mantissa bit (the 10 that TF32
// keeps); infinities and NaNs pass through, overflow rounds to infinity as fp32's own would.
float round_to_tf32(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;
  u += 0x0FFFu + ((u >> 13) & 1u);
  return std::bit_cast<float>(u & ~0x1FFFu);
}

// x rounded to the operand format of `mode` and widened back: fp32 values that format holds exactly.
std::vector<float> round_operands(const float* x, int64_t n, Fp32Matmul mode) {
  std::vector<float> out(static_cast<std::size_t>(n));
  const bool bf16_operands = mode == Fp32Matmul::Bf16Operands;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    out[static_cast<std::size_t>(i)] = bf16_operands ? bf16_to_float(float_to_bf16(x[i])) : round_to_tf32(x[i]);
  return out;
}

}  // namespace

void gemm_rounded_operands(Fp32Matmul mode, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // A product of two bf16 (8-bit significands) or TF32 (11-bit) values is exact in fp32, so sgemm
  // on the rounded operands is the tensor-core GEMM with fp32 accumulation, up to the sums' order.
  const std::vector<float> ra = round_operands(a, trans_a ? span(k, m, lda) : span(m, k, lda), mode);
  const std::vector<float> rb = round_operands(b, trans_b ? span(n, k, ldb) : span(k, n, ldb), mode);
  gemm<float>(trans_a, trans_b, m, n, k, alpha, ra.data(), lda, rb.data(), ldb, beta, c, ldc);
}

template <typename TC>
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t lda,
               const bf16* b, int64_t ldb, float beta, TC* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // bf16 -> fp32 is exact, so this is the bf16 product with fp32 accumulation (what tensor cores
  // compute, up to the order of the sums).
  const std::vector<float> a32 = widen(a, trans_a ? span(k, m, lda) : span(m, k, lda));
  const std::vector<float> b32 = widen(b, trans_b ? span(n, k, ldb) : span(k, n, ldb));
  if constexpr (std::is_same_v<TC, float>) {
    gemm<float>(trans_a, trans_b, m, n, k, alpha, a32.data(), lda, b32.data(), ldb, beta, c, ldc);
  } else {
    // bf16 C: read it in fp32, compute in fp32, round once.
    const int64_t extent = span(m, n, ldc);
    std::vector<float> c32 = widen(c, extent);
    gemm<float>(trans_a, trans_b, m, n, k, alpha, a32.data(), lda, b32.data(), ldb, beta, c32.data(), ldc);
    for (int64_t i = 0; i < m; ++i) convert<float, bf16>(c32.data() + i * ldc, c + i * ldc, n);  // rows only: gaps keep their bits
  }
}

template void gemm_bf16<float>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*, int64_t, const bf16*, int64_t,
                               float, float*, int64_t);
template void gemm_bf16<bf16>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*, int64_t, const bf16*, int64_t,
                              float, bf16*, int64_t);

}  // namespace tripod::cpu
