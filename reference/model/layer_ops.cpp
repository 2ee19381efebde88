#include "model/layer_ops.h"

#include "model/linear.h"

namespace tripod {

void SingleDeviceLayers::embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                           const Tensor& wpe, int64_t seq_len) {
  be.embedding_forward(out, tokens, wte, wpe, seq_len);
}

void SingleDeviceLayers::embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                            const Tensor& tokens, int64_t seq_len) {
  be.embedding_backward(dwte, dwpe, dout, tokens, seq_len);
}

void SingleDeviceLayers::linear_forward(Backend& be, LinearRole, const Tensor& out, const Tensor& inp,
                                        const Tensor& weight, const Tensor& bias) {
  tripod::linear_forward(be, out, inp, weight, bias);
}

void SingleDeviceLayers::linear_backward(Backend& be, LinearRole, const Tensor& dinp, const Tensor& dweight,
                                         const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                         const Tensor& weight) {
  tripod::linear_backward(be, dinp, dweight, dbias, dout, inp, weight, /*accumulate_dinp=*/false);
}

void SingleDeviceLayers::loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) {
  be.cross_entropy_forward(losses, logits, targets);
}

void SingleDeviceLayers::loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) {
  be.cross_entropy_backward(logits, targets, grad_scale);
}

}  // namespace tripod
