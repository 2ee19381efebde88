// Backend::gemm_operands: under the bf16-mixed policy a GEMM operand that two GEMMs share (a
// linear layer's output gradient feeds both its input and its weight gradient) is rounded to bf16
// once instead of once a GEMM. Bit-identical by construction: gemm rounds an fp32 operand to bf16
// (nearest even) and multiplies the rounded values; convert rounds the same way, and gemm takes
// bf16 A and B as they are (test_precision_policy.cpp checks both halves of that). The CPU
// backends' copies are unpadded; a device backend's bf16_operand_copy may zero-pad them
// (backend.h).
#include "backend/backend.h"
#include "core/error.h"

namespace tripod {
namespace {

// A non-empty matrix of fp32, or (`bf16_too`) of bf16.
bool shareable(const Tensor& x, bool bf16_too = false) {
  return x.defined() && (x.dtype() == DType::F32 || (bf16_too && x.dtype() == DType::BF16)) &&
         x.shape().size() >= 2 && x.numel() > 0;
}

// Whether `be` gives x (or what is computed from it) a bf16 copy as a GEMM operand.
bool rounded_as_operand(const Backend& be, const Tensor& x) {
  return be.fp32_matmul() == Fp32Matmul::Bf16Operands && shareable(x);
}

// A bf16 pre-activation (bf16-mixed's, Gpt::rounded_activation_dtype; with it, the GELU backward's
// bf16 output gradient) stands for the fp32 values it holds: the GELU's results from it are fp32,
// and rounded as an operand where fp32 ones would be.
DType computed_dtype(const Tensor& x) { return x.dtype() == DType::BF16 ? DType::F32 : x.dtype(); }

bool gelu_result_rounded(const Backend& be, const Tensor& x) {
  return be.fp32_matmul() == Fp32Matmul::Bf16Operands && shareable(x, true);
}

}  // namespace

bool Backend::rounded_as_gemm_operand(const Tensor& x) const { return rounded_as_operand(*this, x); }

std::vector<Tensor> Backend::gemm_operands(const std::vector<Tensor>& operands, const Tensor& dbias_of_first) {
  TRIPOD_CHECK(!dbias_of_first.defined() || !operands.empty(), "gemm_operands: a bias gradient ",
               dbias_of_first.describe(), " without the operand it sums");
  bool rounded_once = true;
  for (const Tensor& x : operands) rounded_once = rounded_once && rounded_as_operand(*this, x);
  if (!rounded_once) {
    if (dbias_of_first.defined()) bias_grad(dbias_of_first, operands[0]);
    return operands;
  }
  std::vector<Tensor> rounded;
  rounded.reserve(operands.size());
  for (const Tensor& x : operands)
    rounded.push_back(rounded.empty() && dbias_of_first.defined() ? bf16_operand_copy_with_bias_grad(x, dbias_of_first)
                                                                  : bf16_operand_copy(x));
  return rounded;
}

Tensor Backend::gelu_operand(const Tensor& x) {
  TRIPOD_CHECK(x.defined() && x.numel() > 0, "gelu_operand: an empty input ", x.describe());
  if (gelu_result_rounded(*this, x)) return bf16_gelu_operand(x);
  Tensor out = alloc_for_overwrite(x.shape(), computed_dtype(x));
  gelu_forward(out, x);
  return out;
}

Tensor Backend::bf16_gelu_operand(const Tensor& x) {
  Tensor gelu = alloc_for_overwrite(x.shape(), DType::F32);
  gelu_forward(gelu, x);
  return bf16_operand_copy(gelu);
}

Tensor Backend::gelu_backward_operand(const Tensor& inp, const Tensor& dout, const Tensor& dbias) {
  TRIPOD_CHECK(inp.defined() && inp.numel() > 0 && dout.defined() && dout.numel() == inp.numel(),
               "gelu_backward_operand: input ", inp.describe(), " and output gradient ", dout.describe());
  if (gelu_result_rounded(*this, inp) && dout.dtype() != DType::F64 && dbias.defined())
    return bf16_gelu_backward_operand(inp, dout, dbias);
  Tensor d = alloc_for_overwrite(inp.shape(), computed_dtype(inp));
  gelu_backward(d, inp, dout);
  return gemm_operands({d}, dbias)[0];
}

Tensor Backend::bf16_gelu_backward_operand(const Tensor& inp, const Tensor& dout, const Tensor& dbias) {
  Tensor d = alloc_for_overwrite(inp.shape(), DType::F32);
  gelu_backward(d, inp, dout);
  return bf16_operand_copy_with_bias_grad(d, dbias);
}

Tensor Backend::layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                                  const Tensor& bias, double eps) {
  TRIPOD_CHECK(inp.defined() && inp.numel() > 0, "layernorm_operand: an empty input ", inp.describe());
  if (rounded_as_operand(*this, inp))
    return bf16_layernorm_operand(mean, rstd, inp, weight, bias, eps);
  Tensor out = alloc_for_overwrite(inp.shape(), inp.dtype());
  layernorm_forward(out, mean, rstd, inp, weight, bias, eps);
  return out;
}

Tensor Backend::bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                       const Tensor& weight, const Tensor& bias, double eps) {
  Tensor out = alloc_for_overwrite(inp.shape(), DType::F32);
  layernorm_forward(out, mean, rstd, inp, weight, bias, eps);
  return bf16_operand_copy(out);
}

Tensor Backend::attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) {
  TRIPOD_CHECK(qkv.defined() && qkv.rank() == 3 && qkv.dim(2) % 3 == 0, "attention_operand: qkv ",
               qkv.defined() ? qkv.describe() : std::string("none"), " is not [B, T, 3C]");
  // A bf16 qkv (attention_input_dtype's) stands for the policy's fp32 one.
  const DType dtype = attention_dtype(qkv, n_head, "attention_operand");
  if ((dtype != qkv.dtype() && qkv.numel() > 0) || rounded_as_operand(*this, qkv))
    return bf16_attention_operand(state, qkv, n_head);
  Tensor out = alloc_for_overwrite({qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3}, dtype);
  attention_forward(out, state, qkv, n_head);
  return out;
}

Tensor Backend::bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) {
  Tensor out = alloc_for_overwrite({qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3}, DType::F32);
  attention_forward(out, state, qkv, n_head);
  return bf16_operand_copy(out);
}

Tensor Backend::attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state, int64_t n_head,
                                          const Tensor& dbias) {
  TRIPOD_CHECK(
      qkv.defined() && qkv.rank() == 3 && qkv.dim(2) % 3 == 0 && dout.defined() && dout.numel() * 3 == qkv.numel(),
      "attention_backward_operand: qkv ", qkv.defined() ? qkv.describe() : std::string("none"),
      " is not [B, T, 3C] for the output gradient ", dout.defined() ? dout.describe() : std::string("none"));
  const DType dtype = attention_dtype(qkv, n_head, "attention_backward_operand");
  // (a bf16 dout comes with a bf16 qkv: attention_input_dtype's, for the output gradient too)
  if (((dtype != qkv.dtype() && qkv.numel() > 0) || rounded_as_operand(*this, qkv)) && dout.dtype() != DType::F64 &&
      dbias.defined())
    return bf16_attention_backward_operand(dout, qkv, state, n_head, dbias);
  Tensor dqkv = alloc_for_overwrite(qkv.shape(), dtype);
  attention_backward(dqkv, dout, qkv, state, n_head);
  return gemm_operands({dqkv}, dbias)[0];
}

Tensor Backend::bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state,
                                                int64_t n_head, const Tensor& dbias) {
  Tensor dqkv = alloc_for_overwrite(qkv.shape(), DType::F32);
  attention_backward(dqkv, dout, qkv, state, n_head);
  return bf16_operand_copy_with_bias_grad(dqkv, dbias);
}

Tensor Backend::cross_entropy_backward_window_operand(const Tensor& logits, const Tensor& logsumexp,
                                                     const Tensor& targets, VocabWindow window, double grad_scale) {
  if (rounded_as_operand(*this, logits))
    return bf16_cross_entropy_operand(logits, logsumexp, targets, window, grad_scale);
  cross_entropy_backward_window(logits, logsumexp, targets, window, grad_scale);
  return logits;
}

Tensor Backend::bf16_cross_entropy_operand(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                           VocabWindow window, double grad_scale) {
  cross_entropy_backward_window(logits, logsumexp, targets, window, grad_scale);
  return bf16_operand_copy(logits);
}

Tensor Backend::bf16_operand_copy(const Tensor& x) {
  Tensor copy = alloc_for_overwrite(x.shape(), DType::BF16);
  convert(x, copy);
  return copy;
}

Tensor Backend::bf16_operand_copy_with_bias_grad(const Tensor& x, const Tensor& dbias) {
  bias_grad(dbias, x);
  return bf16_operand_copy(x);
}

}  // namespace tripod
