#include "model/linear.h"

namespace tripod {

void linear_forward(Backend& be, const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const int64_t O = weight.dim(0), I = weight.dim(1), N = inp.numel() / I;
  be.gemm_bias(false, true, N, O, I, inp, I, weight, I, out, bias, gemm_accumulate_dtype(inp.dtype()));
}

void linear_backward(Backend& be, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, bool accumulate_dinp) {
  const int64_t O = weight.dim(0), I = weight.dim(1), N = inp.numel() / I;
  const DType acc = gemm_accumulate_dtype(dout.dtype());
  // dout feeds both GEMMs: under bf16-mixed it is rounded once, not once a GEMM (the same bits).
  const std::vector<Tensor> ops = be.gemm_operands({dout, weight, inp});
  const Tensor &dy = ops[0], &w = ops[1], &x = ops[2];
  if (dinp.defined()) be.gemm(false, false, N, I, O, 1.0, dy, O, w, I, accumulate_dinp ? 1.0 : 0.0, dinp, I, acc);
  be.gemm(true, false, O, I, N, 1.0, dy, O, x, I, 1.0, dweight, I, acc);
  if (dbias.defined()) be.bias_grad(dbias, dout);
}

}  // namespace tripod
