#include "model/linear.h"

#include "core/error.h"

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
  // A prepared copy may be zero-padded (backend.h): its last dimension is its leading dimension,
  // and each product's reduction runs over the extent its two operands share, padding included
  // (dX over dout's columns and the weight's rows, dW over dout's and the input's rows).
  // The bias gradient comes with dout's copy: one pass over dout where the backend fuses them.
  const std::vector<Tensor> ops = be.gemm_operands({dout, weight, inp}, dbias);
  const Tensor &dy = ops[0], &w = ops[1], &x = ops[2];
  const int64_t ld_dy = dy.dim(-1), ld_w = w.dim(-1), ld_x = x.dim(-1);
  const int64_t outputs = ld_dy, tokens = dy.numel() / ld_dy;  // O and N, or their padded extents
  check(w.numel() / ld_w == outputs && x.numel() / ld_x == tokens && ld_w >= I && ld_x >= I && tokens >= N,
        "linear_backward: prepared operands ", dy.describe(), ", ", w.describe(), ", ", x.describe(),
        " do not share their extents (O ", O, ", I ", I, ", N ", N, ")");
  if (dinp.defined())
    be.gemm(false, false, N, I, outputs, 1.0, dy, ld_dy, w, ld_w, accumulate_dinp ? 1.0 : 0.0, dinp, I, acc);
  be.gemm(true, false, O, I, tokens, 1.0, dy, ld_dy, x, ld_x, 1.0, dweight, I, acc);
}

}  // namespace tripod
