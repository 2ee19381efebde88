// Softmax cross-entropy and the AdamW update.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace tripod::cpu {
namespace {

template <typename T>
void check_target(int32_t target, int64_t row, int64_t vocab) {
  check(target < vocab, "target token id ", target, " at position ", row, " is outside the vocabulary of ",
        vocab);
}

// log(sum_j exp(x_j)), stabilised by the row maximum.
template <typename T>
T logsumexp(const T* x, int64_t n) {
  T row_max = *std::max_element(x, x + n);
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(x[j] - row_max);
  return row_max + std::log(sum);
}

}  // namespace

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r) check_target<T>(targets[r], r, vocab);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0) {
      losses[r] = 0;
      continue;
    }
    const T* x = logits + r * vocab;
    losses[r] = logsumexp(x, vocab) - x[targets[r]];
  }
}

template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, int64_t rows, int64_t vocab, double grad_scale) {
  const T g = static_cast<T>(grad_scale);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T* x = logits + r * vocab;
    if (targets[r] < 0) {
      std::fill(x, x + vocab, T(0));
      continue;
    }
    T lse = logsumexp(x, vocab);
    for (int64_t j = 0; j < vocab; ++j) x[j] = std::exp(x[j] - lse) * g;
    x[targets[r]] -= g;
  }
}

// Same arithmetic order as torch.optim.AdamW: decay, moments, then p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
template <typename T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1, double beta2, double eps,
           double weight_decay, int64_t step, double grad_scale) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step)));
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T step_size = static_cast<T>(lr / bc1);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T bc2s = static_cast<T>(bc2_sqrt), e = static_cast<T>(eps), gs = static_cast<T>(grad_scale);
  const bool scaled = grad_scale != 1.0;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T g = scaled ? grad[i] * gs : grad[i];  // the same rounding as scaling the gradients first
    T mi = b1 * m[i] + (T(1) - b1) * g;
    T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    T denom = std::sqrt(vi) / bc2s + e;
    param[i] = param[i] * decay - step_size * (mi / denom);
  }
}

template void cross_entropy_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void cross_entropy_forward<double>(double*, const double*, const int32_t*, int64_t, int64_t);
template void cross_entropy_backward<float>(float*, const int32_t*, int64_t, int64_t, double);
template void cross_entropy_backward<double>(double*, const int32_t*, int64_t, int64_t, double);
template void adamw<float>(float*, const float*, float*, float*, int64_t, double, double, double, double, double,
                           int64_t, double);
template void adamw<double>(double*, const double*, double*, double*, int64_t, double, double, double, double,
                            double, int64_t, double);

}  // namespace tripod::cpu
