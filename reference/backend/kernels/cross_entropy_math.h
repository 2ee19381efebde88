// The arithmetic of the softmax cross-entropy kernels (backend/cuda/kernels/cross_entropy.cu),
// written once for the device and for the host replay in
// suites/unit/test_kernel_cross_entropy_math.cpp. Every expression is the CPU backend's
// (loss_optim_kernels.cpp, vocab_window_kernels.cpp), operation for operation; only the order of
// the row sums differs (row_reduce_math.h).
//
// The whole-vocabulary kernels are the window kernels with one window [0, V): the same max pass,
// the same exp-sum pass, the same logsumexp, so a vocab-parallel run with one rank gives the
// unsplit result bit for bit, as on the CPU.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/host_device.h"
#include "backend/kernels/row_reduce_math.h"  // widened

namespace tripod::kernels {

// logsumexp of a row from its max and sum_j exp(x_j - max): the CPU's row_max + log(sum).
template <typename T>
TRIPOD_HD T logsumexp_from(T row_max, T exp_sum) {
  return row_max + std::log(exp_sum);
}

// The column of `target` in the window [start, start + valid) of the vocabulary, or -1 when the
// target is ignored (< 0) or another window's.
TRIPOD_HD int64_t window_target_column(int32_t target, int64_t start, int64_t valid) {
  const int64_t column = static_cast<int64_t>(target) - start;
  return target >= 0 && column >= 0 && column < valid ? column : -1;
}

// The target logit a window contributes to sums[1, n]: x[column], or 0 when it does not hold it.
template <typename X, typename T = Widened<X>>
TRIPOD_HD T window_target_logit(const X* row, int32_t target, int64_t start, int64_t valid) {
  const int64_t column = window_target_column(target, start, valid);
  return column >= 0 ? widened(row[column]) : static_cast<T>(0);
}

// losses[n] = logsumexp - x[target], 0 for an ignored target.
template <typename T>
TRIPOD_HD T cross_entropy_loss(T logsumexp, T target_logit, int32_t target) {
  return target < 0 ? static_cast<T>(0) : logsumexp - target_logit;
}

// One element of the gradient, the CPU's order: exp(x - logsumexp) * g, then minus g at the target.
template <typename T>
TRIPOD_HD T cross_entropy_grad(T logit, T logsumexp, T grad_scale, bool is_target) {
  const T scaled_prob = std::exp(logit - logsumexp) * grad_scale;
  return is_target ? scaled_prob - grad_scale : scaled_prob;
}

// The last of the columns thread `tid` takes in a strided pass over `cols` (tid, tid + stride, ...),
// or -1 when it takes none: where a walk back over the same columns starts (the loss with its
// gradient: the row's end is what the first pass left in L2 most recently).
TRIPOD_HD int64_t last_strided_column(int64_t tid, int64_t cols, int64_t stride) {
  return tid < cols ? tid + (cols - 1 - tid) / stride * stride : -1;
}

// A target the device cannot index: the launchers take no host copy of the targets to check
// (the CPU backend does), so a target >= V yields a NaN loss and a NaN gradient row instead of an
// out-of-bounds read; count_nonfinite then reports it.
TRIPOD_HD bool target_beyond_vocab(int32_t target, int64_t vocab) { return static_cast<int64_t>(target) >= vocab; }

}  // namespace tripod::kernels
