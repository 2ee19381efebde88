// Embedding and softmax cross-entropy over a window of the vocabulary (a vocab-parallel rank's
// rows of wte, or its columns of the logits). The arithmetic is the unsplit kernels', element by
// element and in the same order, so a split computation reassembles the unsplit result exactly
// wherever its sums do not change order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/kernels/row_reduce_math.h"
#include "core/bf16.h"
#include "core/error.h"

namespace tripod::cpu {
namespace {
constexpr int64_t kColumnBlock = 64;  // embedding backward: columns per OpenMP task, as the unsplit kernel

void check_ids(const char* kind, const int32_t* ids, int64_t n, int64_t vocab, bool allow_ignored) {
  for (int64_t i = 0; i < n; ++i)
    if (!(ids[i] < vocab && (allow_ignored || ids[i] >= 0)))
      fail(kind, " id ", ids[i], " at position ", i, " is outside the vocabulary of ", vocab);
}
}  // namespace

template <typename T>
void embedding_lookup_window(T* out, const int32_t* tokens, const T* wte, int64_t n_tokens, int64_t channels,
                             int64_t start, int64_t valid, int64_t vocab) {
  check_ids("token", tokens, n_tokens, vocab, false);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < n_tokens; ++n) {
    const int64_t row = tokens[n] - start;
    T* o = out + n * channels;
    if (row >= 0 && row < valid)
      std::copy(wte + row * channels, wte + (row + 1) * channels, o);
    else
      std::fill(o, o + channels, T(0));  // another window's token
  }
}

template <typename T>
void position_add(T* out, const T* wpe, int64_t rows, int64_t channels, int64_t first_token, int64_t seq_len) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    const T* pe = wpe + ((first_token + i) % seq_len) * channels;
    for (int64_t c = 0; c < channels; ++c) out[i * channels + c] += pe[c];  // wte + wpe, as the unsplit kernel
  }
}

template <typename T>
void embedding_backward_window(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                               int64_t channels, int64_t start, int64_t valid, int64_t vocab, int64_t seq_len) {
  check_ids("token", tokens, n_tokens, vocab, false);
  // Parallel over column blocks, tokens in order inside each: every element accumulates its tokens
  // in the unsplit kernel's order, whatever the thread count.
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < channels; c0 += kColumnBlock) {
    const int64_t c1 = std::min(channels, c0 + kColumnBlock);
    for (int64_t n = 0; n < n_tokens; ++n) {
      const T* dn = dout + n * channels;
      const int64_t row = tokens[n] - start;
      T* pn = dwpe + (n % seq_len) * channels;
      if (row >= 0 && row < valid) {
        T* wn = dwte + row * channels;
        for (int64_t c = c0; c < c1; ++c) wn[c] += dn[c];
      }
      for (int64_t c = c0; c < c1; ++c) pn[c] += dn[c];
    }
  }
}

// A logit as the statistics' type T: itself, or a bf16 logit (bf16-mixed) widened, exactly (the
// device kernels' own helper).
using kernels::widened;

// The per-row pieces of the kernels below, written once, so that the loss with its gradient in
// one pass over a row (cross_entropy_with_gradient) has the separate kernels' bits.
template <typename T, typename L>
T row_max_of(const L* xn, int64_t valid) {
  const L* m = std::max_element(xn, xn + valid, [](L a, L b) { return widened(a) < widened(b); });
  return valid ? widened(*m) : -std::numeric_limits<T>::infinity();
}

template <typename T, typename L>
T exp_sum_of(const L* xn, int64_t valid, T row_max) {
  T sum = 0;
  for (int64_t j = 0; j < valid; ++j) sum += std::exp(widened(xn[j]) - row_max);
  return sum;
}

template <typename T, typename L>
T target_logit_of(const L* xn, int32_t target, int64_t start, int64_t valid) {
  const int64_t j = static_cast<int64_t>(target) - start;
  return target >= 0 && j >= 0 && j < valid ? widened(xn[j]) : T(0);  // one window holds it
}

template <typename T>
T logsumexp_of(T row_max, T exp_sum) {
  return row_max + std::log(exp_sum);  // as the unsplit kernel: row_max + log(sum)
}

// Row xn [cols] becomes g * (exp(x - logsumexp) - onehot(target in the window)); padding columns
// and an ignored row's become 0.
template <typename T>
void gradient_row(T* xn, T logsumexp, int32_t target, int64_t cols, int64_t start, int64_t valid, T g) {
  if (target < 0) {
    std::fill(xn, xn + cols, T(0));
    return;
  }
  for (int64_t j = 0; j < valid; ++j) xn[j] = std::exp(xn[j] - logsumexp) * g;
  std::fill(xn + valid, xn + cols, T(0));  // padding: no logit, no gradient
  const int64_t j = static_cast<int64_t>(target) - start;
  if (j >= 0 && j < valid) xn[j] -= g;
}

// bf16 logits in place: the fp32 logits' arithmetic (the onehot subtracted in fp32), rounded once:
// the bits of the fp32 gradient's bf16 copy.
void gradient_row(bf16* xn, float logsumexp, int32_t target, int64_t cols, int64_t start, int64_t valid, float g) {
  const int64_t column = target < 0 ? -1 : static_cast<int64_t>(target) - start;
  for (int64_t j = 0; j < cols; ++j) {
    float d = 0;
    if (target >= 0 && j < valid) {
      d = std::exp(bf16_to_float(xn[j]) - logsumexp) * g;
      if (j == column) d -= g;
    }
    xn[j] = float_to_bf16(d);
  }
}

template <typename T, typename L>
void logits_row_max(T* row_max, const L* logits, const int32_t* targets, int64_t rows, int64_t cols, int64_t valid,
                    int64_t vocab) {
  check_ids("target", targets, rows, vocab, true);  // before the caller's first reduction
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; ++n) row_max[n] = row_max_of<T>(logits + n * cols, valid);
}

template <typename T, typename L>
void logits_exp_sums(T* sums, const L* logits, const T* row_max, const int32_t* targets, int64_t rows, int64_t cols,
                     int64_t start, int64_t valid) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    const L* xn = logits + n * cols;
    sums[n] = exp_sum_of(xn, valid, row_max[n]);
    sums[rows + n] = target_logit_of<T>(xn, targets[n], start, valid);
  }
}

template <typename T>
void cross_entropy_from_sums(T* losses, T* logsumexp, const T* row_max, const T* sums, const int32_t* targets,
                             int64_t rows) {
  for (int64_t n = 0; n < rows; ++n) {
    logsumexp[n] = logsumexp_of(row_max[n], sums[n]);
    losses[n] = targets[n] < 0 ? T(0) : logsumexp[n] - sums[rows + n];
  }
}

template <typename T, typename L>
void cross_entropy_backward_window(L* logits, const T* logsumexp, const int32_t* targets, int64_t rows, int64_t cols,
                                   int64_t start, int64_t valid, int64_t vocab, double grad_scale) {
  check_ids("target", targets, rows, vocab, true);
  const T g = static_cast<T>(grad_scale);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; ++n) gradient_row(logits + n * cols, logsumexp[n], targets[n], cols, start, valid, g);
}

void cross_entropy_backward_window(bf16* logits, const float* logsumexp, const int32_t* targets, int64_t rows,
                                   int64_t cols, int64_t start, int64_t valid, int64_t vocab, double grad_scale) {
  cross_entropy_backward_window<float, bf16>(logits, logsumexp, targets, rows, cols, start, valid, vocab, grad_scale);
}

// The four kernels above on each row in turn, while it is in cache: the row's statistics (skipped
// for an ignored target, whose loss is 0 and gradient row 0 either way), its loss, its gradient.
template <typename T, typename L>
void cross_entropy_with_gradient(T* losses, L* logits, const int32_t* targets, int64_t rows, int64_t cols,
                                 int64_t vocab, double grad_scale) {
  check_ids("target", targets, rows, vocab, true);  // before any row is overwritten
  const T g = static_cast<T>(grad_scale);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    L* xn = logits + n * cols;
    losses[n] = T(0);
    T logsumexp = 0;
    if (targets[n] >= 0) {
      const T row_max = row_max_of<T>(xn, vocab);
      logsumexp = logsumexp_of(row_max, exp_sum_of(xn, vocab, row_max));
      losses[n] = logsumexp - target_logit_of<T>(xn, targets[n], 0, vocab);
    }
    gradient_row(xn, logsumexp, targets[n], cols, 0, vocab, g);
  }
}

#define TRIPOD_INSTANTIATE(T)                                                                                      \
  template void embedding_lookup_window<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int64_t,      \
                                           int64_t);                                                               \
  template void position_add<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t);                                 \
  template void embedding_backward_window<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, \
                                             int64_t, int64_t);                                                    \
  template void logits_row_max<T, T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);           \
  template void logits_exp_sums<T, T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t);\
  template void cross_entropy_from_sums<T>(T*, T*, const T*, const T*, const int32_t*, int64_t);                  \
  template void cross_entropy_backward_window<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, \
                                                 int64_t, double);                                                 \
  template void cross_entropy_with_gradient<T, T>(T*, T*, const int32_t*, int64_t, int64_t, int64_t, double);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE
template void logits_row_max<float, bf16>(float*, const bf16*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
template void logits_exp_sums<float, bf16>(float*, const bf16*, const float*, const int32_t*, int64_t, int64_t,
                                           int64_t, int64_t);
template void cross_entropy_with_gradient<float, bf16>(float*, bf16*, const int32_t*, int64_t, int64_t, int64_t,
                                                       double);

}  // namespace tripod::cpu
