// Linear layer y = x W^T + b with W stored [out, in], written as backend GEMMs. Parallel layers
// (column/row-parallel) wrap these; the model only calls them.
#pragma once
#include "backend/backend.h"

namespace tripod {

// out[N,O] = inp[N,I] @ weight[O,I]^T + bias[O]   (bias may be undefined)
// out's rows may be longer than O (padded logits, LayerOps::local_width): [N, O'] with O' >= O,
// columns from O on left as they are; a bias needs unpadded rows.
void linear_forward(Backend& be, const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);

// dinp[N,I] (= or += per accumulate_dinp) dout[N,O] @ weight[O,I];
// dweight[O,I] += dout^T @ inp; dbias[O] += sum_n dout[n].
// dout's rows may be longer than O ([N, O'], O' >= O) when its columns from O on are zero (padded
// logits' gradient): the products may then run over them.
void linear_backward(Backend& be, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, bool accumulate_dinp);

}  // namespace tripod
