// A CPU backend that does what the CUDA backend's bf16_operand_copy does (backend.h allows it):
// bf16 copies zero-padded to multiples of 8 in both sizes, so that the model code's use of padded
// copies (each copy's own leading dimension, reductions over the shared padded extents) is
// checked where it runs. Its GEMMs sum in index order (ordered_sums_cpu_backend.h), so the zeros
// add nothing: the same bits as OrderedSumsCpuBackend's with unpadded copies, on any CPU.
#pragma once
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "support/ordered_sums_cpu_backend.h"

namespace tripod::testing {

class PaddingCpuBackend : public OrderedSumsCpuBackend {
 public:
  // `row_multiple`: the logits' rows padded to it too (Backend::gemm_row_multiple; CUDA's is 8), so
  // that the LM head's products run over the padded vocabulary, as on the device.
  explicit PaddingCpuBackend(int64_t row_multiple = 1)
      : row_multiple_(row_multiple) {}
  int64_t gemm_row_multiple() const override { return row_multiple_; }

 protected:
  Tensor bf16_operand_copy(const Tensor& x) override {
    const Tensor copy = cpu::CpuBackend::bf16_operand_copy(x);
    const int64_t cols = copy.dim(-1), rows = copy.numel() / cols;
    const int64_t rows8 = (rows + 7) / 8 * 8, cols8 = (cols + 7) / 8 * 8;
    std::vector<bf16> values(static_cast<std::size_t>(copy.numel())), out(static_cast<std::size_t>(rows8 * cols8));
    download(copy, values.data());
    for (int64_t r = 0; r < rows; ++r) std::copy_n(values.begin() + r * cols, cols, out.begin() + r * cols8);
    Tensor padded = alloc({rows8, cols8}, DType::BF16);
    upload(out.data(), padded);
    return padded;
  }
  // As CUDA does for a copy it pads: gelu_forward, then the padded copy (Backend's default).
  Tensor bf16_gelu_operand(const Tensor& x) override { return Backend::bf16_gelu_operand(x); }
  Tensor bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                const Tensor& bias, double eps) override {
    return Backend::bf16_layernorm_operand(mean, rstd, inp, weight, bias, eps);
  }
  Tensor bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) override {
    return Backend::bf16_attention_operand(state, qkv, n_head);
  }
  Tensor bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state, int64_t n_head,
                                         const Tensor& dbias) override {
    return Backend::bf16_attention_backward_operand(dout, qkv, state, n_head, dbias);
  }

 private:
  int64_t row_multiple_;
};

}  // namespace tripod::testing
