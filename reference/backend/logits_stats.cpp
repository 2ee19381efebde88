// The single-device loss: Backend::logits_stats, a row's max and sum of exponentials, and
// Backend::cross_entropy_with_gradient, the loss with its gradient. Separate passes here (the
// bits of the vocabulary-parallel path's calls); a backend overrides them with fewer (the CPU and
// the CUDA backend: one pass a row for both, a device's stats as an online max and sum).
#include "backend/backend.h"
#include "core/error.h"

namespace tripod {

void Backend::logits_stats(const Tensor& row_max, const Tensor& sums, const Tensor& logits, const Tensor& targets,
                           VocabWindow window) {
  logits_row_max(row_max, logits, targets, window);
  logits_exp_sums(sums, logits, row_max, targets, window);
}

void Backend::check_loss_with_gradient(const char* op, const Tensor& losses, const Tensor& logits,
                                       const Tensor& targets, int64_t vocab) const {
  const int64_t rows = losses.numel(), cols = logits.numel() > 0 ? logits.dim(-1) : 0;
  TRIPOD_CHECK(!rounded_as_gemm_operand(logits), op, ": logits ", logits.describe(),
               " are rounded as the LM head's operand; the gradient in their place would not be it");
  TRIPOD_CHECK(targets.numel() == rows && logits.numel() == rows * cols && vocab >= 0 && vocab <= cols, op, ": ",
               rows, " losses and ", targets.numel(), " targets for logits ", logits.describe(),
               " over a vocabulary of ", vocab);
}

void Backend::cross_entropy_with_gradient(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                          int64_t vocab, double grad_scale) {
  check_loss_with_gradient("cross_entropy_with_gradient", losses, logits, targets, vocab);
  const int64_t n = losses.numel();
  const DType dt = losses.dtype();  // the statistics': fp32 for bf16 logits
  const Tensor row_max = alloc({n}, dt), sums = alloc({2, n}, dt), logsumexp = alloc({n}, dt);
  const VocabWindow whole{0, vocab, vocab};
  logits_stats(row_max, sums, logits, targets, whole);
  cross_entropy_from_sums(losses, logsumexp, row_max, sums, targets);
  cross_entropy_backward_window(logits, logsumexp, targets, whole, grad_scale);
}

}  // namespace tripod
