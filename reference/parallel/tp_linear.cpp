#include "parallel/tp_linear.h"

#include "core/error.h"
#include "model/linear.h"
#include "parallel/tp_regions.h"

namespace tripod::tp {
namespace {

// Rows of a token-major activation whose rows are `width` wide.
int64_t token_rows(const char* what, const char* arg, const Tensor& t, int64_t width) {
  check(t.defined(), what, ": ", arg, " is undefined");
  TRIPOD_CHECK(width > 0 && t.numel() % width == 0, what, ": ", arg, " ", shape_str(t.shape()),
               " is not a whole number of rows of ", width, " features");
  return t.numel() / width;
}

void check_numel(const char* what, const char* arg, const Tensor& t, int64_t expected, const char* shape) {
  TRIPOD_CHECK(t.defined() && t.numel() == expected, what, ": ", arg, " ",
               t.defined() ? shape_str(t.shape()) : std::string("(undefined)"), " should hold ", shape, " = ", expected,
               " elements");
}

void check_weight(const char* what, const Tensor& weight) {
  TRIPOD_CHECK(weight.defined() && weight.rank() == 2, what, ": the weight must be a matrix [out, in], got ",
               weight.defined() ? shape_str(weight.shape()) : std::string("(undefined)"));
}

}  // namespace

void column_parallel_linear_forward(Backend& be, const TpGroup& tp, const Tensor& out, const Tensor& inp,
                                    const Tensor& inp_gathered, const Tensor& weight, const Tensor& bias) {
  const char* what = "column_parallel_linear_forward";
  check_weight(what, weight);
  const int64_t Ol = weight.dim(0), I = weight.dim(1);
  const Tensor& x = tp.sequence_parallel ? inp_gathered : inp;  // the [N, I] input every rank multiplies
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), inp, inp_gathered);
  const int64_t N = token_rows(what, tp.sequence_parallel ? "inp_gathered" : "inp", x, I);
  check_numel(what, "out", out, N * Ol, "[N, out/tp]");
  if (bias.defined()) check_numel(what, "bias", bias, Ol, "[out/tp]");

  if (tp.sequence_parallel) gather_from_sequence_region_forward(tp.comm, inp, inp_gathered);  // ḡ
  // (without SP, f's forward is the identity: x is the replicated input)
  linear_forward(be, out, x, weight, bias);  // out[N,Ol] = x @ W^T + b: the same dot products as unsplit
}

void column_parallel_linear_backward(Backend& be, const TpGroup& tp, const Tensor& dinp, const Tensor& dinp_full,
                                     const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& x,
                                     const Tensor& weight, CommRequest* x_arriving) {
  const char* what = "column_parallel_linear_backward";
  check_weight(what, weight);
  const int64_t Ol = weight.dim(0), I = weight.dim(1);
  const Tensor& dx = tp.sequence_parallel ? dinp_full : dinp;  // [N, I] partial input gradient
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), dinp, dinp_full);
  const int64_t N = token_rows(what, "dout", dout, Ol);
  check_numel(what, "x", x, N * I, "[N, in]");
  check_numel(what, tp.sequence_parallel ? "dinp_full" : "dinp", dx, N * I, "[N, in]");
  check_numel(what, "dweight", dweight, Ol * I, "[out/tp, in]");
  if (dbias.defined()) check_numel(what, "dbias", dbias, Ol, "[out/tp]");

  // dx[N,I] = dout[N,Ol] @ W[Ol,I]: the contribution of this rank's output features only. A weight
  // given as its bf16 operand (model/linear.h) takes dout's copy, as the GEMM would round it.
  // A bf16 dout (bf16-mixed's logits gradient, its own operand) takes the weight's copy likewise.
  const Tensor dy = is_weight_operand(weight) ? be.gemm_operands({dout})[0] : dout;  // its own leading dimension
  const Tensor w = dout.dtype() == DType::BF16 && !is_weight_operand(weight) ? be.gemm_operands({weight})[0] : weight;
  be.gemm(false, false, N, I, Ol, 1.0, dy, dy.dim(-1), w, w.dim(-1), 0.0, dx, I, gemm_accumulate_dtype(dout.dtype()));
  if (x_arriving != nullptr) x_arriving->wait();  // the weight gradient reads x
  // Complete it across the group (f's or ḡ's backward) while the weight gradient is computed.
  auto pending = tp.sequence_parallel ? gather_from_sequence_region_backward_async(tp.comm, dinp_full, dinp)
                                      : copy_to_tp_region_backward_async(tp.comm, dinp);
  linear_backward(be, Tensor(), dweight, dbias, dout, x, weight, false);  // dW += dout^T @ x; db += sum dout
  pending->wait();
}

void row_parallel_linear_forward(Backend& be, const TpGroup& tp, const Tensor& out, const Tensor& out_partial,
                                 const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const char* what = "row_parallel_linear_forward";
  check_weight(what, weight);
  const int64_t O = weight.dim(0), Il = weight.dim(1);
  const int64_t N = token_rows(what, "inp", inp, Il);
  const Tensor& partial = tp.sequence_parallel ? out_partial : out;  // [N, O]
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), out, out_partial);
  check_numel(what, tp.sequence_parallel ? "out_partial" : "out", partial, N * O, "[N, out]");
  if (bias.defined()) check_numel(what, "bias", bias, O, "[out]");

  linear_forward(be, partial, inp, weight, Tensor());  // partial[N,O] = inp[N,Il] @ W[O,Il]^T
  const bool bias_every_rank = tp.fault(Fault::RowParallelBiasEveryRank);  // the bug: tp copies summed
  if (bias.defined() && bias_every_rank) be.bias_add(partial, bias);
  if (tp.sequence_parallel)
    reduce_scatter_to_sequence_region_forward(tp.comm, out_partial, out);  // ḡ*: out[Ns,O]
  else
    reduce_from_tp_region_forward(tp.comm, out);  // g: out[N,O]
  if (bias.defined() && !bias_every_rank) be.bias_add(out, bias);  // once, after the sum over ranks
}

void row_parallel_linear_backward(Backend& be, const TpGroup& tp, const Tensor& dinp, const Tensor& dweight,
                                  const Tensor& dbias, const Tensor& dout, const Tensor& dout_gathered,
                                  const Tensor& inp, const Tensor& weight) {
  const char* what = "row_parallel_linear_backward";
  check_weight(what, weight);
  const int64_t O = weight.dim(0), Il = weight.dim(1);
  const int64_t N = token_rows(what, "inp", inp, Il);
  const Tensor& g = tp.sequence_parallel ? dout_gathered : dout;  // [N, O], the same on every rank
  if (tp.sequence_parallel) check_sequence_shapes(what, tp.size(), dout, dout_gathered);
  check_numel(what, tp.sequence_parallel ? "dout_gathered" : "dout", g, N * O, "[N, out]");
  check_numel(what, "dinp", dinp, N * Il, "[N, in/tp]");
  check_numel(what, "dweight", dweight, O * Il, "[out, in/tp]");
  if (dbias.defined()) check_numel(what, "dbias", dbias, O, "[out]");

  if (tp.sequence_parallel) {
    // ḡ*'s backward: gather the token blocks; this rank's share of the bias gradient meanwhile.
    auto pending = reduce_scatter_to_sequence_region_backward_async(tp.comm, dout, dout_gathered);
    if (dbias.defined()) be.bias_grad(dbias, dout);  // partial: this rank's tokens only
    pending->wait();
    linear_backward(be, dinp, dweight, Tensor(), g, inp, weight, false);
  } else {
    // g's backward is the identity: dout is replicated, so the bias gradient is complete here.
    linear_backward(be, dinp, dweight, dbias, reduce_from_tp_region_backward(dout), inp, weight, false);
  }
}

}  // namespace tripod::tp
