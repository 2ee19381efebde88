#include "model/layer_ops.h"

#include "model/linear.h"
#include "core/error.h"

namespace tripod {

void LayerOps::linear_forward_residual(Backend& be, LinearRole role, const Tensor& out, const Tensor& inp,
                                       const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                       Tensor* kept_input, Tensor* kept_weight) {
  linear_forward(be, role, out, inp, weight, bias, kept_input, kept_weight);
  be.add(out, out, residual);
}

void LayerOps::linear_forward_from_operand(Backend&, LinearRole, const Tensor&, const Tensor& inp_operand,
                                           const Tensor&, const Tensor&, const Tensor&, Tensor*) {
  fail("linear_forward_from_operand (", inp_operand.describe(),
       "): this layer strategy keeps no prepared inputs and takes none");
}

void LayerOps::linear_backward_from_operand(Backend&, LinearRole, const Tensor&, const Tensor&,
                                            const Tensor& dout_operand, int64_t, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&) {
  fail("linear_backward_from_operand (", dout_operand.describe(),
       "): this layer strategy keeps no prepared inputs and takes none");
}

Tensor LayerOps::loss_backward_operand(Backend&, const Tensor& logits, const Tensor&, double) {
  fail("loss_backward_operand (logits ", logits.describe(), "): this layer strategy keeps no prepared inputs");
}

bool LayerOps::loss_forward_with_gradient(Backend& be, const Tensor& losses, const Tensor& logits,
                                          const Tensor& targets, double) {
  loss_forward(be, losses, logits, targets);
  return false;
}

SingleDeviceLayers::SingleDeviceLayers(int64_t vocab, int64_t logits_row_multiple)
    : vocab_(vocab), logits_row_multiple_(logits_row_multiple) {
  check(vocab > 0 && logits_row_multiple > 0, "SingleDeviceLayers: vocabulary ", vocab, ", row multiple ",
        logits_row_multiple);
}

int64_t SingleDeviceLayers::local_width(LinearRole role, int64_t full) const {
  if (role != LinearRole::LmHead) return full;
  check(full == vocab_, "SingleDeviceLayers: the LM head's width ", full, " is not the vocabulary ", vocab_);
  return (full + logits_row_multiple_ - 1) / logits_row_multiple_ * logits_row_multiple_;
}

void SingleDeviceLayers::embedding_forward(Backend& be, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                           const Tensor& wpe, int64_t seq_len) {
  be.embedding_forward(out, tokens, wte, wpe, seq_len);
}

void SingleDeviceLayers::embedding_backward(Backend& be, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                            const Tensor& tokens, int64_t seq_len) {
  be.embedding_backward(dwte, dwpe, dout, tokens, seq_len);
}

void SingleDeviceLayers::linear_forward(Backend& be, LinearRole, const Tensor& out, const Tensor& inp,
                                        const Tensor& weight, const Tensor& bias, Tensor* kept_input,
                                        Tensor* kept_weight) {
  tripod::linear_forward(be, out, inp, weight, bias, kept_input, Tensor(), kept_weight);
}

void SingleDeviceLayers::linear_forward_residual(Backend& be, LinearRole, const Tensor& out, const Tensor& inp,
                                                 const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                                 Tensor* kept_input, Tensor* kept_weight) {
  tripod::linear_forward(be, out, inp, weight, bias, kept_input, residual, kept_weight);
}

void SingleDeviceLayers::linear_forward_from_operand(Backend& be, LinearRole, const Tensor& out,
                                                     const Tensor& inp_operand, const Tensor& weight,
                                                     const Tensor& bias, const Tensor& residual, Tensor* kept_weight) {
  tripod::linear_forward_from_operand(be, out, inp_operand, weight, bias, residual, kept_weight);
}

void SingleDeviceLayers::linear_backward_from_operand(Backend& be, LinearRole, const Tensor& dinp,
                                                      const Tensor& dweight, const Tensor& dout_operand, int64_t rows,
                                                      const Tensor& inp, const Tensor& weight,
                                                      const Tensor& kept_input, const Tensor& kept_weight) {
  tripod::linear_backward_from_operand(be, dinp, dweight, dout_operand, rows, inp, weight, kept_input, kept_weight);
}

void SingleDeviceLayers::linear_backward(Backend& be, LinearRole, const Tensor& dinp, const Tensor& dweight,
                                         const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                                         const Tensor& weight, const Tensor& kept_input, const Tensor& kept_weight) {
  tripod::linear_backward(be, dinp, dweight, dbias, dout, inp, weight, /*accumulate_dinp=*/false, kept_input,
                          kept_weight);
}

void SingleDeviceLayers::check_loss_shapes(const char* op, const Tensor& losses, const Tensor& logits,
                                           const Tensor& targets) const {
  const int64_t n = losses.numel();
  TRIPOD_CHECK(n == targets.numel() && logits.numel() == n * logits.dim(-1), op, ": ", n, " losses and ",
               targets.numel(), " targets for logits ", logits.describe());
  const int64_t width = local_width(LinearRole::LmHead, vocab_);
  TRIPOD_CHECK(logits.dim(-1) == width, op, ": logits ", logits.describe(), " have rows of ", logits.dim(-1),
               " columns, ", width, " expected (vocabulary ", vocab_, ")");
}

void SingleDeviceLayers::loss_forward(Backend& be, const Tensor& losses, const Tensor& logits, const Tensor& targets) {
  check_loss_shapes("loss_forward", losses, logits, targets);
  const int64_t n = losses.numel();
  const DType dt = losses.dtype();  // the statistics': fp32 for bf16-mixed's bf16 logits
  Tensor& lse = logsumexp_[logits.address()];
  if (!lse.defined() || lse.numel() != n || lse.dtype() != dt) lse = be.alloc({n}, dt);
  const Tensor flat_targets = targets.reshape({n});
  const Tensor row_max = be.alloc({n}, dt), sums = be.alloc({2, n}, dt);  // sums: [sum of exp | target logit]
  be.logits_stats(row_max, sums, logits, flat_targets, whole_vocabulary());
  be.cross_entropy_from_sums(losses, lse, row_max, sums, flat_targets);
}

bool SingleDeviceLayers::loss_forward_with_gradient(Backend& be, const Tensor& losses, const Tensor& logits,
                                                    const Tensor& targets, double grad_scale) {
  // Logits rounded to a bf16 operand (fp32 ones under the bf16-operand policy) are not their
  // gradient's operand: the backward writes that copy from them (loss_backward_operand).
  if (be.rounded_as_gemm_operand(logits)) return LayerOps::loss_forward_with_gradient(be, losses, logits, targets, 0);
  check_loss_shapes("loss_forward_with_gradient", losses, logits, targets);
  be.cross_entropy_with_gradient(losses, logits, targets.reshape({targets.numel()}), vocab_, grad_scale);
  return true;
}

Tensor SingleDeviceLayers::take_logsumexp(const Tensor& logits) {
  const auto lse = logsumexp_.find(logits.address());
  TRIPOD_CHECK(lse != logsumexp_.end(), "loss backward without its forward (logits ", logits.describe(), ")");
  // Used up (the logits are the gradient now): dropped, so that logits at new addresses (a new
  // batch shape's activations) do not leave entries behind. The tensor returned keeps the storage
  // alive for the kernel that reads it.
  Tensor taken = lse->second;
  logsumexp_.erase(lse);
  return taken;
}

void SingleDeviceLayers::loss_backward(Backend& be, const Tensor& logits, const Tensor& targets, double grad_scale) {
  be.cross_entropy_backward_window(logits, take_logsumexp(logits), targets.reshape({targets.numel()}),
                                   whole_vocabulary(), grad_scale);
}

Tensor SingleDeviceLayers::loss_backward_operand(Backend& be, const Tensor& logits, const Tensor& targets,
                                                 double grad_scale) {
  return be.cross_entropy_backward_window_operand(logits, take_logsumexp(logits), targets.reshape({targets.numel()}),
                                                  whole_vocabulary(), grad_scale);
}

}  // namespace tripod
