#include "parallel/tp_layers.h"

#include "model/linear.h"
#include "parallel/tp_linear.h"
#include "parallel/tp_regions.h"

namespace tripod::tp {

TensorParallelLayers::TensorParallelLayers(const ModelConfig& config, Communicator& tp, bool sequence_parallel,
                                           const FaultPlan* faults, int vocab_multiple)
    : group_{tp, sequence_parallel, faults},
      vocab_(vocab_shard(config.vocab_size, tp.size(), tp.rank(), vocab_multiple)) {
  validate_tensor_parallel(config, tp.size());
}

int64_t TensorParallelLayers::local_tokens(int64_t n_tokens) const {
  return group_.sequence_parallel ? sequence_shard_rows(n_tokens, group_.size()) : n_tokens;
}

Tensor TensorParallelLayers::reused(Backend& be, Tensor& buffer, int64_t rows, int64_t cols, DType dtype) {
  if (!buffer.defined() || buffer.numel() < rows * cols || buffer.dtype() != dtype) buffer = be.alloc({rows * cols}, dtype);
  return buffer.view(0, {rows, cols});
}

void TensorParallelLayers::reserve(Backend& be, int64_t tokens, int64_t channels, DType dtype) {
  if (!group_.sequence_parallel) return;
  const int64_t rows = local_tokens(tokens) * group_.size();  // as gather_buffer sizes a gathered block
  reused(be, gathered_, rows, channels, dtype);
  reused(be, scratch_, rows, channels, dtype);
}

std::size_t TensorParallelLayers::held_bytes() const {
  std::size_t bytes = (scratch_.defined() ? scratch_.bytes() : 0) + (gathered_.defined() ? gathered_.bytes() : 0);
  for (const auto& [logits, lse] : logsumexp_) bytes += lse.bytes();
  return bytes;
}

int64_t TensorParallelLayers::local_width(LinearRole role, int64_t full) const {
  if (role == LinearRole::LmHead) return vocab_.rows;
  return full / group_.size();  // heads and MLP columns divide evenly (validated)
}

void TensorParallelLayers::embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                             const Tensor& wpe, int64_t seq_len) {
  const Tensor partial = group_.sequence_parallel ? scratch(be, tokens.numel(), out.dim(-1), out.dtype()) : Tensor();
  vocab_parallel_embedding_forward(be, group_, vocab_, out, partial, tokens.reshape({tokens.numel()}), wte, wpe,
                                   seq_len);
}

void TensorParallelLayers::embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                              const Tensor& tokens, int64_t seq_len) {
  const Tensor gathered = group_.sequence_parallel ? scratch(be, tokens.numel(), dout.dim(-1), dout.dtype()) : Tensor();
  vocab_parallel_embedding_backward(be, group_, vocab_, dwte, dwpe, dout, gathered, tokens.reshape({tokens.numel()}),
                                    seq_len);
}

void TensorParallelLayers::linear_forward(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp,
                                          const Tensor& weight, const Tensor& bias, Tensor* kept_input,
                                          Tensor* kept_weight) {
  if (one_rank()) return tripod::linear_forward(be, out, inp, weight, bias, kept_input, Tensor(), kept_weight);
  const Tensor in2 = inp.reshape({inp.numel() / inp.dim(-1), inp.dim(-1)});
  const Tensor out2 = out.reshape({out.numel() / out.dim(-1), out.dim(-1)});
  const bool sp = group_.sequence_parallel;
  if (row_parallel(role)) {  // SP: out is this rank's token block, the partial products go through scratch
    const Tensor partial = sp ? scratch(be, in2.dim(0), out2.dim(-1), out.dtype()) : Tensor();
    row_parallel_linear_forward(be, group_, out2, partial, in2, weight, bias);
  } else {  // SP: inp is this rank's token block, gathered here (and again in backward)
    column_parallel_linear_forward(be, group_, out2, in2, sp ? gather_buffer(be, in2) : Tensor(), weight, bias);
  }
}

void TensorParallelLayers::linear_backward(Backend& be, LinearRole role, const Tensor& dinp, const Tensor& dweight,
                                           const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                           const Tensor& weight, const Tensor& kept_input,
                                           const Tensor& kept_weight) {
  if (one_rank())
    return tripod::linear_backward(be, dinp, dweight, dbias, dout, inp, weight, /*accumulate_dinp=*/false, kept_input,
                                   kept_weight);
  auto flat2 = [](const Tensor& t) { return t.reshape({t.numel() / t.dim(-1), t.dim(-1)}); };
  const bool sp = group_.sequence_parallel;
  if (row_parallel(role)) {
    const Tensor in2 = flat2(inp);
    const Tensor g = sp ? scratch(be, in2.dim(0), dout.dim(-1), dout.dtype()) : Tensor();
    row_parallel_linear_backward(be, group_, flat2(dinp), dweight, dbias, flat2(dout), g, in2, weight);
  } else {
    const Tensor in2 = flat2(inp);
    const Tensor full = sp ? gather_buffer(be, in2) : Tensor();
    // SP: the input again, as forward saw it, arriving while the input gradient is computed.
    auto gathering = sp ? gather_from_sequence_region_forward_async(group_.comm, in2, full) : nullptr;
    const Tensor dfull = sp ? scratch(be, full.dim(0), full.dim(1), dinp.dtype()) : Tensor();
    column_parallel_linear_backward(be, group_, flat2(dinp), dfull, dweight, dbias, flat2(dout), sp ? full : in2,
                                    weight, gathering.get());
  }
}

void TensorParallelLayers::linear_forward_residual(Backend& be, LinearRole role, const Tensor& out,
                                                   const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                                   const Tensor& residual, Tensor* kept_input, Tensor* kept_weight) {
  if (one_rank()) return tripod::linear_forward(be, out, inp, weight, bias, kept_input, residual, kept_weight);
  LayerOps::linear_forward_residual(be, role, out, inp, weight, bias, residual, kept_input, kept_weight);
}

void TensorParallelLayers::linear_forward_from_operand(Backend& be, LinearRole role, const Tensor& out,
                                                       const Tensor& inp_operand, const Tensor& weight,
                                                       const Tensor& bias, const Tensor& residual,
                                                       Tensor* kept_weight) {
  if (!one_rank())
    return LayerOps::linear_forward_from_operand(be, role, out, inp_operand, weight, bias, residual, kept_weight);
  tripod::linear_forward_from_operand(be, out, inp_operand, weight, bias, residual, kept_weight);
}

void TensorParallelLayers::linear_backward_from_operand(Backend& be, LinearRole role, const Tensor& dinp,
                                                        const Tensor& dweight, const Tensor& dout_operand,
                                                        int64_t rows, const Tensor& inp, const Tensor& weight,
                                                        const Tensor& kept_input, const Tensor& kept_weight) {
  if (!one_rank())
    return LayerOps::linear_backward_from_operand(be, role, dinp, dweight, dout_operand, rows, inp, weight,
                                                  kept_input, kept_weight);
  tripod::linear_backward_from_operand(be, dinp, dweight, dout_operand, rows, inp, weight, kept_input, kept_weight);
}

void TensorParallelLayers::loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) {
  Tensor& lse = logsumexp_[logits.address()];
  if (!lse.defined() || lse.numel() != losses.numel() || lse.dtype() != losses.dtype())
    lse = be.alloc({losses.numel()}, losses.dtype());
  vocab_parallel_cross_entropy_forward(be, group_.comm, vocab_, losses, lse, logits,
                                       targets.reshape({targets.numel()}), group_.faults);
}

const Tensor& TensorParallelLayers::logsumexp_of(const Tensor& logits) const {
  auto lse = logsumexp_.find(logits.address());
  check(lse != logsumexp_.end(), "vocab-parallel loss backward without its forward");
  return lse->second;
}

void TensorParallelLayers::loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) {
  vocab_parallel_cross_entropy_backward(be, vocab_, logits, logsumexp_of(logits), targets.reshape({targets.numel()}),
                                        grad_scale, group_.faults);
}

Tensor TensorParallelLayers::loss_backward_operand(Backend& be, const Tensor& logits, const Tensor& targets,
                                                   double grad_scale) {
  if (!one_rank()) return LayerOps::loss_backward_operand(be, logits, targets, grad_scale);
  return vocab_parallel_cross_entropy_backward_operand(be, vocab_, logits, logsumexp_of(logits),
                                                       targets.reshape({targets.numel()}), grad_scale, group_.faults);
}

}  // namespace tripod::tp
