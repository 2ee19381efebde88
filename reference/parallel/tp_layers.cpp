#include "parallel/tp_layers.h"

#include "parallel/tp_linear.h"

namespace tripod::tp {

TensorParallelLayers::TensorParallelLayers(const ModelConfig& config, Communicator& tp)
    : group_{tp, false}, vocab_(vocab_shard(config.vocab_size, tp.size(), tp.rank())) {
  validate_tensor_parallel(config, tp.size());
}

int64_t TensorParallelLayers::local_width(LinearRole role, int64_t full) const {
  if (role == LinearRole::LmHead) return vocab_.rows;
  return full / group_.size();  // heads and MLP columns divide evenly (validated)
}

void TensorParallelLayers::embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                             const Tensor& wpe, int64_t seq_len) {
  vocab_parallel_embedding_forward(be, group_, vocab_, out, Tensor(), tokens.reshape({tokens.numel()}), wte, wpe,
                                   seq_len);
}

void TensorParallelLayers::embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                              const Tensor& tokens, int64_t seq_len) {
  vocab_parallel_embedding_backward(be, group_, vocab_, dwte, dwpe, dout, Tensor(), tokens.reshape({tokens.numel()}),
                                    seq_len);
}

void TensorParallelLayers::linear_forward(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp,
                                          const Tensor& weight, const Tensor& bias) {
  const Tensor in2 = inp.reshape({inp.numel() / inp.dim(-1), inp.dim(-1)});
  const Tensor out2 = out.reshape({out.numel() / out.dim(-1), out.dim(-1)});
  if (row_parallel(role)) {
    row_parallel_linear_forward(be, group_, out2, Tensor(), in2, weight, bias);
  } else {
    column_parallel_linear_forward(be, group_, out2, in2, Tensor(), weight, bias);
  }
}

void TensorParallelLayers::linear_backward(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight,
                                           const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                           const Tensor& weight) {
  auto flat2 = [](const Tensor& t) { return t.reshape({t.numel() / t.dim(-1), t.dim(-1)}); };
  if (row_parallel(role)) {
    row_parallel_linear_backward(be, group_, flat2(dinp), dweight, dbias, flat2(dout), Tensor(), flat2(inp), weight);
  } else {
    column_parallel_linear_backward(be, group_, flat2(dinp), Tensor(), dweight, dbias, flat2(dout), flat2(inp), weight);
  }
}

void TensorParallelLayers::loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) {
  if (!logsumexp_.defined() || logsumexp_.numel() != losses.numel() || logsumexp_.dtype() != losses.dtype())
    logsumexp_ = be.alloc({losses.numel()}, losses.dtype());
  vocab_parallel_cross_entropy_forward(be, group_.comm, vocab_, losses, logsumexp_, logits,
                                       targets.reshape({targets.numel()}));
}

void TensorParallelLayers::loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) {
  vocab_parallel_cross_entropy_backward(be, vocab_, logits, logsumexp_, targets.reshape({targets.numel()}), grad_scale);
}

}  // namespace tripod::tp
