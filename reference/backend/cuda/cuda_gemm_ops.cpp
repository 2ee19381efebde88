// The CUDA backend's GEMMs through cuBLASLt, and the bf16 operand copies of the bf16-mixed policy:
// per GEMM into grown scratch (bf16_copy), or shared by several GEMMs (gemm_operands' copies,
// zero-padded to multiples of 8, and the output gradient's copy with its bias gradient).
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/host/gemm_layout.h"
#include "backend/cuda/kernels/cross_entropy.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/layernorm.h"
#include "backend/cuda/kernels/reductions.h"

namespace tripod::cuda {

void CudaBackend::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
                       int64_t lda, const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc,
                       DType accumulate) {
  gemm_with_bias(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, accumulate, nullptr);
}

namespace {

bool rows_aligned(const void* c, int64_t ldc) {
  return cuda::gemm_alignment_bytes(c, ldc, sizeof(float)) >= cuda::kTensorCoreAlignmentBytes;
}

// Under the bf16-operand policy, the fp32 C [m, n] (leading dimension ldc) is computed in place
// where neither size needs padding to a multiple of 8 and its rows are 16-byte aligned; elsewhere
// in a padded scratch and copied back (gemm_with_bias).
bool bf16_product_in_place(int64_t m, int64_t n, const void* c, int64_t ldc) {
  return cuda::padded_leading_dimension(m, sizeof(bf16)) == m && cuda::padded_leading_dimension(n, sizeof(bf16)) == n &&
         rows_aligned(c, ldc);
}

}  // namespace

void CudaBackend::gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a,
                            int64_t lda, const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias,
                            DType accumulate) {
  const bool fusable = fusions_.on(CudaFusion::BiasEpilogue) && bias.defined() && bias.dtype() == DType::F32 &&
                       c.dtype() == DType::F32 && bias.numel() == n && c.numel() == m * n;
  if (rounds_fp32_result(c, a, bias) && a.dtype() == DType::BF16 && bias.numel() == n && c.numel() == m * n &&
      fusions_.on(CudaFusion::BiasEpilogue) && library_declined_.empty() && m > 0 && n > 0 && k > 0 &&
      reinterpret_cast<std::uintptr_t>(bias.address()) % cuda::kTensorCoreAlignmentBytes == 0) {
    // The bf16 rounding of the fp32 sum straight from the epilogue; where cuBLASLt declines
    // (nothing written), the default's fp32 result and its conversion, from then on (the pair of
    // types is what it declines: not asked again), said by library_declined.
    try {  // false: the bias was not taken in (C holds the product alone), so the default below runs
      if (gemm_with_bias(trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n, accumulate,
                         ptr<float>(bias, "gemm")))
        return;
    } catch (const cuda::NoBf16BiasEpilogue& e) {
      if (library_declined_.empty()) library_declined_ = e.what();
    }
  }
  if (!fusable) return Backend::gemm_bias(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, bias, accumulate);
  if (!gemm_with_bias(trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n, accumulate, ptr<float>(bias, "gemm")))
    bias_add(c, bias);
}

void CudaBackend::gemm_bias_residual(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a,
                                     int64_t lda, const Tensor& b, int64_t ldb, const Tensor& c, const Tensor& bias,
                                     const Tensor& residual, DType accumulate) {
  check_gemm_residual(c, residual, m, n);
  const bool bias_ok = !bias.defined() || (bias.dtype() == c.dtype() && bias.numel() == n);
  if (!fusions_.on(CudaFusion::ResidualEpilogue) || !bias_ok || !residual_in_epilogue(m, n, k, a, c, residual, accumulate))
    return Backend::gemm_bias_residual(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, bias, residual, accumulate);
  const bool bias_epilogue = fusions_.on(CudaFusion::BiasEpilogue) && bias.defined() && bias.dtype() == DType::F32;
  const float* bias32 = bias_epilogue ? ptr<float>(bias, "gemm_bias_residual") : nullptr;
  bool bias_added = false;
  try {
    bias_added = gemm_with_bias(trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, 1.0, c, n, accumulate, bias32, &residual);
  } catch (const cuda::NoAlgorithmWithSeparateC&) {  // c untouched: the GEMM, the bias and the add apart
    return Backend::gemm_bias_residual(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, bias, residual, accumulate);
  }
  if (!bias_added && bias.defined()) bias_add(c, bias);
}

bool CudaBackend::residual_in_epilogue(int64_t m, int64_t n, int64_t k, const Tensor& a, const Tensor& c,
                                       const Tensor& residual, DType accumulate) const {
  if (m <= 0 || n <= 0 || k <= 0 || c.numel() != m * n) return false;
  const bool bf16_operands = a.dtype() == DType::F32 && c.dtype() == DType::F32 && accumulate == DType::F32 &&
                             fp32_matmul() == Fp32Matmul::Bf16Operands;
  return !bf16_operands || (bf16_product_in_place(m, n, c.address(), n) && rows_aligned(residual.address(), n));
}

bool CudaBackend::gemm_with_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                                 const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, double beta,
                                 const Tensor& c, int64_t ldc, DType accumulate, const float* bias,
                                 const Tensor* c_in) {
  const void* c_in_raw = c_in != nullptr ? raw(*c_in, "gemm") : nullptr;
  require_same_dtype(a, b, "gemm");
  // A kernel reading past a tensor does not fault reliably on a GPU: check the spans here.
  auto checked_span = [&](const char* operand, const Tensor& t, int64_t rows, int64_t row_length, int64_t ld) {
    const int64_t span = gemm_operand_span(rows, row_length, ld);
    if (span > t.numel())
      fail("gemm: ", operand, " (", t.describe(), ") holds ", t.numel(), " elements but [", rows, ", ", row_length,
           "] with leading dimension ", ld, " spans ", span, " (m = ", m, ", n = ", n, ", k = ", k, ")");
    return span;
  };
  const int64_t a_span = checked_span("A", a, trans_a ? k : m, trans_a ? m : k, lda);
  const int64_t b_span = checked_span("B", b, trans_b ? n : k, trans_b ? k : n, ldb);
  checked_span("C", c, m, n, ldc);
  const bool fp32 = a.dtype() == DType::F32 && c.dtype() == DType::F32 && accumulate == DType::F32;
  if (fp32 && fp32_matmul() == Fp32Matmul::Bf16Operands && m > 0 && n > 0 && k > 0) {
    // The bf16-mixed policy: A and B rounded to bf16 into scratch, then a bf16 tensor-core GEMM
    // accumulating in fp32 into the fp32 C. cuBLASLt's fast kernels want 16-byte aligned rows
    // and sizes (gemm_layout.h): the copies are made so, m, n and k zero-padded to a multiple of 8
    // (zeros add nothing to a sum); C is computed in an aligned scratch where it is not so.
    const int64_t mp = cuda::padded_leading_dimension(m, sizeof(bf16));
    const int64_t np = cuda::padded_leading_dimension(n, sizeof(bf16));
    const int64_t kp = cuda::padded_leading_dimension(k, sizeof(bf16));
    int64_t lda16 = 0, ldb16 = 0;
    const void* a16 = bf16_copy(a, {trans_a ? k : m, trans_a ? m : k, lda, a_span}, trans_a ? kp : mp,
                                trans_a ? mp : kp, scratch_a_, lda16);
    const void* b16 = bf16_copy(b, {trans_b ? n : k, trans_b ? k : n, ldb, b_span}, trans_b ? np : kp,
                                trans_b ? kp : np, scratch_b_, ldb16);
    float* c32 = ptr<float>(c, "gemm");
    if (mp == m && np != n && n >= 8 && rows_aligned(c32, ldc) && bias == nullptr && c_in_raw == nullptr) {
      ragged_columns_gemm(trans_a, trans_b, m, n, kp, alpha, a16, lda16, b16, ldb16, beta, c32, ldc);
      return false;
    }
    const bool in_place = bf16_product_in_place(m, n, c32, ldc);
    // (not check(): its message arguments are evaluated first, and c_in is null for most GEMMs; that
    // call dereferenced it in every bf16-operand GEMM of fp32 tensors, a segmentation fault the
    // first GPU run after it found)
    if (c_in_raw != nullptr && !in_place)
      fail("gemm: a C read apart from D (", c_in->describe(), ") for a C that is not computed in place (m = ", m,
           ", n = ", n, ")");
    float* target = in_place ? c32 : grown(scratch_c_, mp * np, DType::F32).device_data<float>();  // [mp, np]
    const int64_t ld_target = in_place ? ldc : np;  // np, a multiple of 8, aligns fp32 rows too
    if (!in_place && beta != 0.0) cuda::convert_2d<float, float>(c32, ldc, m, n, target, np, m, n, ctx_);
    // A padded C's bias would have to be padded too: added afterwards there.
    const bool fused = cuda::gemm(trans_a, trans_b, mp, np, kp, alpha, a16, lda16, b16, ldb16, DType::BF16, beta,
                                  target, ld_target, DType::F32, DType::F32, false, ctx_, in_place ? bias : nullptr,
                                  c_in_raw);
    if (!in_place) cuda::convert_2d<float, float>(target, np, m, n, c32, ldc, m, n, ctx_);
    return fused;
  }
  return cuda::gemm(trans_a, trans_b, m, n, k, alpha, raw(a, "gemm"), lda, raw(b, "gemm"), ldb, a.dtype(), beta,
                    raw(c, "gemm"), ldc, c.dtype(), accumulate, fp32 && fp32_matmul() == Fp32Matmul::Tf32Operands,
                    ctx_, c.dtype() != DType::F64 && accumulate == DType::F32 ? bias : nullptr, c_in_raw);
}

void CudaBackend::ragged_columns_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t kp, double alpha,
                                      const void* a16, int64_t lda16, const void* b16, int64_t ldb16, double beta,
                                      float* c32, int64_t ldc) {
  const int64_t n8 = n / 8 * 8, tail = n - n8;  // 0 < tail < 8
  cuda::gemm(trans_a, trans_b, m, n8, kp, alpha, a16, lda16, b16, ldb16, DType::BF16, beta, c32, ldc, DType::F32,
             DType::F32, false, ctx_, nullptr);
  // op(B)'s columns from n8 on: the copy's rows n8.. (B stored [n, k]) or its columns n8.. ([k, n]),
  // 8 of them, as the copy is zero-padded to a multiple of 8 (bf16_copy); C's through [m, 8] scratch.
  const void* b_tail = static_cast<const bf16*>(b16) + (trans_b ? n8 * ldb16 : n8);
  float* scratch = grown(scratch_c_, m * 8, DType::F32).device_data<float>();
  if (beta != 0.0) cuda::convert_2d<float, float>(c32 + n8, ldc, m, tail, scratch, 8, m, tail, ctx_);
  cuda::gemm(trans_a, trans_b, m, 8, kp, alpha, a16, lda16, b_tail, ldb16, DType::BF16, beta, scratch, 8, DType::F32,
             DType::F32, false, ctx_, nullptr);
  cuda::convert_2d<float, float>(scratch, 8, m, tail, c32 + n8, ldc, m, tail, ctx_);
}

namespace {

// host/gemm_layout.h's operand_copy_shape of x as a [numel / last dim, last dim] matrix.
OperandCopyShape operand_copy_shape(const Tensor& x) {
  const int64_t cols = x.dim(-1);
  return cuda::operand_copy_shape(x.numel() / cols, cols);
}

}  // namespace

Tensor CudaBackend::bf16_operand_copy(const Tensor& x) {
  const OperandCopyShape shape = operand_copy_shape(x);
  Tensor copy = alloc_for_overwrite({shape.rows_padded, shape.cols_padded}, DType::BF16);
  if (!shape.padded()) convert(x, copy);  // contiguous: the 4-wide conversion
  else
    cuda::convert_2d<float, bf16>(ptr<float>(x, "gemm_operands"), shape.cols, shape.rows, shape.cols,
                                  copy.device_data<bf16>(), shape.cols_padded, shape.rows_padded, shape.cols_padded,
                                  ctx_);
  return copy;
}

Tensor CudaBackend::bf16_operand_copy_with_bias_grad(const Tensor& x, const Tensor& dbias) {
  const char* op = "gemm_operands (with the bias gradient)";
  const OperandCopyShape shape = operand_copy_shape(x);
  if (!fusions_.on(CudaFusion::BiasGradCopy) || shape.padded() || dbias.dtype() != DType::F32 ||
      dbias.numel() != shape.cols)
    return Backend::bf16_operand_copy_with_bias_grad(x, dbias);
  Tensor copy = alloc_for_overwrite({shape.rows, shape.cols}, DType::BF16);
  cuda::bias_grad_and_bf16_copy(ptr<float>(dbias, op), copy.device_data<bf16>(), ptr<float>(x, op), shape.rows,
                                shape.cols, ctx_);
  return copy;
}

Tensor CudaBackend::bf16_gelu_operand(const Tensor& x) {
  const OperandCopyShape shape = operand_copy_shape(x);
  if (!fusions_.on(CudaFusion::OperandProducers) || shape.padded()) return Backend::bf16_gelu_operand(x);
  const char* op = "gelu_operand";
  Tensor copy = alloc_for_overwrite({shape.rows, shape.cols}, DType::BF16);
  if (x.dtype() == DType::BF16) cuda::gelu_to_bf16(copy.device_data<bf16>(), ptr<bf16>(x, op), x.numel(), ctx_);
  else cuda::gelu_to_bf16(copy.device_data<bf16>(), ptr<float>(x, op), x.numel(), ctx_);
  return copy;
}

Tensor CudaBackend::bf16_gelu_backward_operand(const Tensor& inp, const Tensor& dout, const Tensor& dbias) {
  const char* op = "gelu_backward_operand";
  const OperandCopyShape shape = operand_copy_shape(inp);
  if (!fusions_.on(CudaFusion::OperandProducers) || shape.padded() || dbias.dtype() != DType::F32 ||
      dbias.numel() != shape.cols)
    return Backend::bf16_gelu_backward_operand(inp, dout, dbias);
  Tensor copy = alloc_for_overwrite({shape.rows, shape.cols}, DType::BF16);
  auto write = [&](const auto* pre_activation, const auto* output_grad) {  // fp32, or bf16-mixed's bf16
    cuda::gelu_backward_bias_grad_and_bf16_copy(ptr<float>(dbias, op), copy.device_data<bf16>(), pre_activation,
                                                output_grad, shape.rows, shape.cols, ctx_);
  };
  if (inp.dtype() == DType::BF16 && dout.dtype() == DType::BF16) write(ptr<bf16>(inp, op), ptr<bf16>(dout, op));
  else if (inp.dtype() == DType::BF16) write(ptr<bf16>(inp, op), ptr<float>(dout, op));
  else write(ptr<float>(inp, op), ptr<float>(dout, op));
  return copy;
}

Tensor CudaBackend::bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                           const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layernorm_operand";
  const OperandCopyShape shape = operand_copy_shape(inp);
  if (!fusions_.on(CudaFusion::OperandProducers) || shape.padded() || weight.numel() != shape.cols)
    return Backend::bf16_layernorm_operand(mean, rstd, inp, weight, bias, eps);
  Tensor copy = alloc_for_overwrite({shape.rows, shape.cols}, DType::BF16);
  cuda::layernorm_forward_to_bf16(copy.device_data<bf16>(), ptr<float>(mean, op), ptr<float>(rstd, op),
                                  ptr<float>(inp, op), ptr<float>(weight, op), ptr<float>(bias, op), shape.rows,
                                  shape.cols, eps, ctx_);
  return copy;
}

Tensor CudaBackend::bf16_cross_entropy_operand(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                               VocabWindow window, double grad_scale) {
  const char* op = "cross_entropy_backward_window_operand";
  const OperandCopyShape shape = operand_copy_shape(logits);
  if (!fusions_.on(CudaFusion::OperandProducers) || shape.padded() || shape.rows != targets.numel())
    return Backend::bf16_cross_entropy_operand(logits, logsumexp, targets, window, grad_scale);
  Tensor copy = alloc_for_overwrite({shape.rows, shape.cols}, DType::BF16);
  cuda::cross_entropy_backward_window_to_bf16(copy.device_data<bf16>(), ptr<float>(logits, op),
                                              ptr<float>(logsumexp, op), ptr<int32_t>(targets, op), shape.rows,
                                              shape.cols, window.start, window.valid, grad_scale, ctx_);
  return copy;
}

const void* CudaBackend::bf16_copy(const Tensor& x, const StoredMatrix& stored, int64_t rows_padded,
                                   int64_t row_length_padded, Tensor& scratch, int64_t& ld_copy) {
  // Grown, never shrunk: the training step repeats the same shapes, so this allocates only in the
  // first step. Work on the one stream is ordered, so a GEMM still reading the old contents
  // finishes before the next conversion overwrites them.
  const float* src = ptr<float>(x, "gemm");
  if (rows_padded == stored.rows && row_length_padded == stored.row_length &&
      cuda::gemm_alignment_bytes(nullptr, stored.ld, sizeof(bf16)) >= cuda::kTensorCoreAlignmentBytes) {
    ld_copy = stored.ld;  // the span as it lies, ld padding included: one contiguous conversion
    grown(scratch, stored.span, DType::BF16);
    cuda::convert<float, bf16>(src, scratch.device_data<bf16>(), stored.span, ctx_);
  } else {
    ld_copy = cuda::padded_leading_dimension(row_length_padded, sizeof(bf16));
    grown(scratch, rows_padded * ld_copy, DType::BF16);
    cuda::convert_2d<float, bf16>(src, stored.ld, stored.rows, stored.row_length, scratch.device_data<bf16>(), ld_copy,
                                  rows_padded, ld_copy, ctx_);
  }
  return scratch.device_raw();
}

}  // namespace tripod::cuda
