#include "model/linear.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace tripod {

namespace {

// out[N, O] (contiguous) = x[N, k] w[O, k]^T + bias (+ residual where defined).
void product_into(Backend& be, const Tensor& out, int64_t N, int64_t O, int64_t k, const Tensor& x, int64_t ld_x,
                  const Tensor& w, int64_t ld_w, const Tensor& bias, const Tensor& residual, DType acc) {
  if (residual.defined()) return be.gemm_bias_residual(false, true, N, O, k, x, ld_x, w, ld_w, out, bias, residual, acc);
  be.gemm_bias(false, true, N, O, k, x, ld_x, w, ld_w, out, bias, acc);
}

// Rows of out longer than O (padded logits) take the plain GEMM with ldc: no bias or residual.
void check_padded_rows(const char* op, const Tensor& out, int64_t N, int64_t O, const Tensor& bias,
                       const Tensor& residual) {
  TRIPOD_CHECK(out.dim(-1) > O && out.numel() == N * out.dim(-1) && !bias.defined() && !residual.defined(), op,
               ": output ", out.describe(), " for ", N, " rows of ", O, " outputs",
               bias.defined() ? " with a bias" : "", residual.defined() ? " with a residual" : "");
}

// product_into, or where out's rows are longer than O (padded logits) the plain GEMM with ldc.
void product_into_rows(Backend& be, const char* op, const Tensor& out, int64_t N, int64_t O, int64_t k,
                       const Tensor& x, int64_t ld_x, const Tensor& w, int64_t ld_w, const Tensor& bias,
                       const Tensor& residual, DType acc) {
  const int64_t row_length = out.dim(-1);
  if (row_length == O) return product_into(be, out, N, O, k, x, ld_x, w, ld_w, bias, residual, acc);
  check_padded_rows(op, out, N, O, bias, residual);
  if (out.dtype() == DType::BF16 && x.dtype() != DType::BF16) {  // fp32 products rounded once (gemm_bias's)
    const Tensor sum = be.alloc({N, row_length}, DType::F32);      // zero padding columns, as out's
    be.gemm(false, true, N, O, k, 1.0, x, ld_x, w, ld_w, 0.0, sum, row_length, acc);
    return be.convert(sum, out);
  }
  be.gemm(false, true, N, O, k, 1.0, x, ld_x, w, ld_w, 0.0, out, row_length, acc);
}

// The weight copy a caller passes in through kept_weight (another micro-batch's, linear.h), and
// the pointer cleared for the copy this call leaves there.
Tensor take_given(Tensor* kept_weight) {
  if (kept_weight == nullptr) return Tensor();
  Tensor given = *kept_weight;
  *kept_weight = Tensor();
  return given;
}

}  // namespace

bool is_weight_operand(const Tensor& weight) { return weight.defined() && weight.dtype() == DType::BF16; }

namespace {

// A weight copy made earlier stands in for gemm_operands({weight})[0]: it must be one, of the
// operand's type, covering the weight's [O, I] with rows at least I long.
const Tensor& checked_weight_copy(const char* op, const Tensor& copy, const Tensor& weight, const Tensor& operand) {
  const int64_t O = weight.dim(0), I = weight.dim(1);
  TRIPOD_CHECK(copy.dtype() == operand.dtype() && copy.dtype() != weight.dtype() && copy.dim(-1) >= I &&
                   copy.numel() / copy.dim(-1) >= O,
               op, ": the weight copy passed in, ", copy.describe(), ", is not a prepared copy of ", weight.describe(),
               " for the ", dtype_name(operand.dtype()), " operand");
  return copy;
}

}  // namespace

void linear_forward(Backend& be, const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    Tensor* kept_input, const Tensor& residual, Tensor* kept_weight) {
  const int64_t O = weight.dim(0), I = weight.dim(1), N = inp.numel() / I;
  const int64_t row_length = out.dim(-1);
  const DType acc = gemm_accumulate_dtype(inp.dtype());
  const Tensor given_weight = take_given(kept_weight);
  if (kept_input != nullptr) *kept_input = Tensor();
  if (is_weight_operand(weight)) {  // the weight is its own operand: inp's copy is the one to make
    const Tensor x = be.gemm_operands({inp})[0];
    TRIPOD_CHECK(x.dtype() == weight.dtype(), "linear_forward: a ", dtype_name(weight.dtype()), " weight operand ",
                 weight.describe(), " for a ", x.describe(), " input: the backend's GEMM policy does not round to it");
    product_into_rows(be, "linear_forward", out, N, O, I, x, x.dim(-1), weight, I, bias, residual, acc);
    if (kept_input != nullptr && row_length == O) *kept_input = x;
    if (kept_weight != nullptr) *kept_weight = weight;
    return;
  }
  if (kept_input != nullptr && row_length == O) {
    std::vector<Tensor> ops = be.gemm_operands(given_weight.defined() ? std::vector<Tensor>{inp}
                                                                      : std::vector<Tensor>{inp, weight});
    if (ops[0].dtype() != inp.dtype()) {  // prepared copies (possibly zero-padded, backend.h)
      if (given_weight.defined()) ops.push_back(checked_weight_copy("linear_forward", given_weight, weight, ops[0]));
      const int64_t ld_x = ops[0].dim(-1), ld_w = ops[1].dim(-1);
      product_into(be, out, N, O, std::min(ld_x, ld_w), ops[0], ld_x, ops[1], ld_w, bias, residual, acc);
      *kept_input = ops[0];
      if (kept_weight != nullptr) *kept_weight = ops[1];
      return;
    }
  }
  product_into_rows(be, "linear_forward", out, N, O, I, inp, I, weight, I, bias, residual, acc);
}

void linear_forward_from_operand(Backend& be, const Tensor& out, const Tensor& inp_operand, const Tensor& weight,
                                 const Tensor& bias, const Tensor& residual, Tensor* kept_weight) {
  const Tensor given_weight = take_given(kept_weight);
  const int64_t O = weight.dim(0), I = weight.dim(1), row_length = out.dim(-1), N = out.numel() / row_length;
  TRIPOD_CHECK(row_length >= O && inp_operand.numel() > 0 && inp_operand.dim(-1) >= I &&
                   inp_operand.numel() / inp_operand.dim(-1) >= N,
               "linear_forward_from_operand: operand ", inp_operand.describe(), " for ", N, " rows of ", I,
               " inputs into ", out.describe());
  if (row_length > O) check_padded_rows("linear_forward_from_operand", out, N, O, bias, residual);
  const DType acc = gemm_accumulate_dtype(weight.dtype());
  auto product = [&](int64_t k, const Tensor& x, int64_t ld_x, const Tensor& w, int64_t ld_w) {
    product_into_rows(be, "linear_forward_from_operand", out, N, O, k, x, ld_x, w, ld_w, bias, residual, acc);
  };
  if (inp_operand.dtype() == weight.dtype() && !is_weight_operand(weight)) {  // not prepared (no bf16 policy): the plain product
    TRIPOD_CHECK(inp_operand.numel() == N * I, "linear_forward_from_operand: an unprepared ", inp_operand.describe(),
                 " for ", N, " rows of ", I, " inputs");
    return product(I, inp_operand, I, weight, I);
  }
  const Tensor w = is_weight_operand(weight) ? weight
                   : given_weight.defined()
                       ? checked_weight_copy("linear_forward_from_operand", given_weight, weight, inp_operand)
                       : be.gemm_operands({weight})[0];
  check(w.dtype() == inp_operand.dtype(), "linear_forward_from_operand: a ", dtype_name(inp_operand.dtype()),
        " operand with a ", dtype_name(w.dtype()), " weight copy");
  const int64_t ld_x = inp_operand.dim(-1), ld_w = w.dim(-1);
  product(std::min(ld_x, ld_w), inp_operand, ld_x, w, ld_w);
  if (kept_weight != nullptr) *kept_weight = w;
}

namespace {

// inp is [N, I], or absent where its kept copy stands in for it.
void check_input_or_kept(const char* op, const Tensor& inp, const Tensor& kept_input, int64_t N, int64_t I) {
  TRIPOD_CHECK(inp.defined() ? inp.numel() == N * I : kept_input.defined(), op, ": input ", inp.describe(), " for ", N,
               " rows of ", I, " inputs", inp.defined() ? "" : " and no kept copy of it");
}

// dinp[N,I] (= or +=) dy @ w and dweight[O,I] += dy^T @ x, from operands that may be prepared
// copies (zero-padded, backend.h) and whose dy rows may be longer than O (zeros past O, linear.h):
// each operand's last dimension is its leading dimension, and each product's reduction runs over
// the extent its two operands both hold, zeros included (dX over dy's columns and w's rows, dW
// over dy's and x's rows).
void backward_products(Backend& be, const Tensor& dinp, const Tensor& dweight, const Tensor& dy, const Tensor& w,
                       const Tensor& x, int64_t O, int64_t I, int64_t N, bool accumulate_dinp, DType acc) {
  const int64_t ld_dy = dy.dim(-1), ld_w = w.dim(-1), ld_x = x.dim(-1);
  const int64_t outputs = std::min(ld_dy, w.numel() / ld_w), tokens = std::min(dy.numel() / ld_dy, x.numel() / ld_x);
  TRIPOD_CHECK(outputs >= O && tokens >= N && ld_w >= I && ld_x >= I, "linear_backward: prepared operands ",
               dy.describe(), ", ", w.describe(), ", ", x.describe(), " do not cover the extents (O ", O, ", I ", I,
               ", N ", N, ")");
  if (dinp.defined())
    be.gemm(false, false, N, I, outputs, 1.0, dy, ld_dy, w, ld_w, accumulate_dinp ? 1.0 : 0.0, dinp, I, acc);
  be.gemm(true, false, O, I, tokens, 1.0, dy, ld_dy, x, ld_x, 1.0, dweight, I, acc);
}

}  // namespace

void linear_backward(Backend& be, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, bool accumulate_dinp,
                     const Tensor& kept_input, const Tensor& given_kept_weight) {
  const Tensor& kept_weight = is_weight_operand(weight) ? weight : given_kept_weight;  // its own copy
  const int64_t O = weight.dim(0), I = weight.dim(1), N = dout.numel() / dout.dim(-1);
  if (dout.dtype() == DType::BF16) {
    // Its own GEMM operand already (bf16-mixed's logits gradient, written over the bf16 logits):
    // the weight and input are rounded to meet it.
    TRIPOD_CHECK(!dbias.defined() && !accumulate_dinp, "linear_backward: a bf16 output gradient ", dout.describe(),
                 " with a bias gradient or an accumulated input gradient");
    return linear_backward_from_operand(be, dinp, dweight, dout, N, inp, weight, kept_input, given_kept_weight);
  }
  check_input_or_kept("linear_backward", inp, kept_input, N, I);
  // dout feeds both GEMMs: under bf16-mixed it is rounded once, not once a GEMM (the same bits),
  // and its bias gradient comes with that copy (one pass over dout where the backend fuses them).
  TRIPOD_CHECK(!dbias.defined() || dout.dim(-1) == O, "linear_backward: a bias gradient for padded rows ",
               dout.describe());
  // Kept copies of the weight and inp (linear_forward) pair with dout's copy; where that is not
  // prepared, the weight and inp themselves are used.
  std::vector<Tensor> to_prepare{dout};
  if (!kept_weight.defined()) to_prepare.push_back(weight);
  if (!kept_input.defined()) to_prepare.push_back(inp);
  const std::vector<Tensor> prepared = be.gemm_operands(to_prepare, dbias);
  const Tensor& dout_op = prepared[0];
  auto kept_or = [&](const Tensor& kept, const Tensor& plain, std::size_t& next, const char* what) {
    if (!kept.defined()) return prepared[next++];
    TRIPOD_CHECK(dout_op.dtype() == kept.dtype() || plain.defined(), "linear_backward: a kept ", what, " ",
                 kept.describe(), " without the policy that made it, and no ", what);
    return dout_op.dtype() == kept.dtype() ? kept : plain;
  };
  std::size_t next = 1;
  const Tensor w_op = kept_or(kept_weight, weight, next, "weight");
  const Tensor x_op = kept_or(kept_input, inp, next, "input");
  backward_products(be, dinp, dweight, dout_op, w_op, x_op, O, I, N, accumulate_dinp,
                    gemm_accumulate_dtype(dout.dtype()));
}

void linear_backward_from_operand(Backend& be, const Tensor& dinp, const Tensor& dweight, const Tensor& dout_operand,
                                  int64_t rows, const Tensor& inp, const Tensor& weight, const Tensor& kept_input,
                                  const Tensor& given_kept_weight) {
  const Tensor& kept_weight = is_weight_operand(weight) ? weight : given_kept_weight;  // its own copy
  const int64_t O = weight.dim(0), I = weight.dim(1), N = rows;
  check_input_or_kept("linear_backward_from_operand", inp, kept_input, N, I);
  TRIPOD_CHECK(
      dout_operand.numel() > 0 && dout_operand.dim(-1) >= O && dout_operand.numel() / dout_operand.dim(-1) >= N,
      "linear_backward_from_operand: output gradient operand ", dout_operand.describe(), " for ", N, " rows of ", O,
      " outputs");
  if (dout_operand.dtype() == weight.dtype() && !is_weight_operand(weight)) {  // not prepared: the plain products
    TRIPOD_CHECK(inp.defined(), "linear_backward_from_operand: an unprepared ", dout_operand.describe(),
                 " and no input");
    return backward_products(be, dinp, dweight, dout_operand, weight, inp, O, I, N, false,
                             gemm_accumulate_dtype(weight.dtype()));
  }
  // The copies not kept from the forward, prepared in one call.
  std::vector<Tensor> to_prepare;
  if (!kept_weight.defined()) to_prepare.push_back(weight);
  if (!kept_input.defined()) to_prepare.push_back(inp);
  const std::vector<Tensor> prepared = to_prepare.empty() ? std::vector<Tensor>{} : be.gemm_operands(to_prepare);
  const std::vector<Tensor> ops{kept_weight.defined() ? kept_weight : prepared[0],
                                kept_input.defined() ? kept_input : prepared.back()};
  check(ops[0].dtype() == dout_operand.dtype() && ops[1].dtype() == dout_operand.dtype(),
        "linear_backward_from_operand: a ", dtype_name(dout_operand.dtype()), " operand with ",
        dtype_name(ops[0].dtype()), "/", dtype_name(ops[1].dtype()), " weight and input copies");
  backward_products(be, dinp, dweight, dout_operand, ops[0], ops[1], O, I, N, false,
                    gemm_accumulate_dtype(weight.dtype()));
}

}  // namespace tripod
