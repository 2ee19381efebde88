// Linear layer y = x W^T + b with W stored [out, in], written as backend GEMMs. Parallel layers
// (column/row-parallel) wrap these; the model only calls them.
#pragma once
#include "backend/backend.h"

namespace tripod {

// A weight may come as its own GEMM operand: a bf16 [O, I] (an owner that holds only the weight's
// bf16 rounding, as ZeRO-3's bf16 operand gathers do, parallel/param_gatherer.h). It then stands
// where its prepared copy would (is_weight_operand), under the bf16-operand policy only: the same
// bits as the fp32 weight it was rounded from. Every function below takes either.
bool is_weight_operand(const Tensor& weight);

// out[N,O] = inp[N,I] @ weight[O,I]^T + bias[O]   (bias may be undefined)
// out's rows may be longer than O (padded logits, LayerOps::local_width): [N, O'] with O' >= O,
// columns from O on left as they are; a bias needs unpadded rows.
// `kept_input` non-null (unpadded rows only): under the backend's bf16-operand policy the product
// runs on gemm_operands' copies of inp and weight, and inp's copy is stored there for
// linear_backward (the same bits as the per-GEMM rounding); otherwise it is left undefined.
// `residual` defined (unpadded rows only): out = residual + (inp @ weight^T + bias), the residual
// stream's add after a block's output projection, through Backend::gemm_bias_residual.
// `kept_weight` non-null: where inp's copy is kept, the weight's copy is stored there too, for
// linear_backward's dX product (the weight cannot change between a micro-batch's forward and its
// backward); otherwise it is left undefined. A copy already there on entry (another micro-batch's
// of the same weight, model/weight_copies.h) is used instead of rounding the weight again, and
// left there.
void linear_forward(Backend& be, const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    Tensor* kept_input = nullptr, const Tensor& residual = Tensor(), Tensor* kept_weight = nullptr);

// linear_forward from inp's prepared operand `inp_operand` (Backend::gelu_operand's, or a copy that
// gemm_operands made): the weight's copy is prepared here, and the product is linear_forward's with
// `kept_input` set, bit for bit. inp itself need not exist. out's rows may be padded as
// linear_forward's (the LM head's logits from lnf's operand; no bias or residual then).
// `kept_weight` non-null: the weight's prepared copy is stored there, and one there on entry is
// used, as linear_forward's.
void linear_forward_from_operand(Backend& be, const Tensor& out, const Tensor& inp_operand, const Tensor& weight,
                                 const Tensor& bias, const Tensor& residual = Tensor(),
                                 Tensor* kept_weight = nullptr);

// dinp[N,I] (= or += per accumulate_dinp) dout[N,O] @ weight[O,I];
// dweight[O,I] += dout^T @ inp; dbias[O] += sum_n dout[n].
// dout's rows may be longer than O ([N, O'], O' >= O) when its columns from O on are zero (padded
// logits' gradient): the products may then run over them.
// `kept_input`: linear_forward's copy of this inp (undefined: inp is prepared here); where it is a
// bf16 copy, inp may be undefined (linear_forward_from_operand's input, never stored in fp32).
// `kept_weight`: linear_forward's copy of this weight (undefined: the weight is prepared here).
void linear_backward(Backend& be, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, bool accumulate_dinp,
                     const Tensor& kept_input = Tensor(), const Tensor& kept_weight = Tensor());

// linear_backward (dinp overwritten) from dout's prepared operand `dout_operand` (Backend::
// gelu_backward_operand's, whose making also added the bias gradient) for `rows` rows: the weight's
// and inp's copies are prepared here (inp's taken from `kept_input` where defined; inp may then be
// undefined). The bits of linear_backward.
void linear_backward_from_operand(Backend& be, const Tensor& dinp, const Tensor& dweight, const Tensor& dout_operand,
                                  int64_t rows, const Tensor& inp, const Tensor& weight,
                                  const Tensor& kept_input = Tensor(), const Tensor& kept_weight = Tensor());

}  // namespace tripod
