// Token and position embedding arithmetic (backend/cuda/kernels/embedding.cu), forward and a
// backward that is bit-identical to cpu::embedding_backward(_window) without atomics.
//
// Why it is bit-identical: the CPU adds, for every element dwte[row, c] and dwpe[t, c], the dout
// elements of its tokens one at a time in token order, starting from the element's value. The
// device does the same additions in the same order, only with different elements in parallel:
//   token gradient     thread (class k, column c) walks every token in order and adds those whose
//                      table row r has r % classes == k. Every row belongs to one class, so each
//                      dwte[r, c] is updated by one thread, in token order. `classes` only splits
//                      the work (more threads than the C of a plain thread-per-column loop).
//   position gradient  thread (t, c) adds dout[n, c] for n = t, t + T, ... in order: the tokens
//                      at position t, in token order.
// test_kernel_embedding_math.cpp runs these functions in host loops and compares bit for bit.
// Table rows outside the window (another rank's ids, or bad ids) are never dereferenced.
#pragma once
#include <cstdint>

#include "backend/kernels/host_device.h"

namespace tripod::kernels {

// The table row of token id `id` in a window [start, start + valid) of the vocabulary, or -1 when
// the window does not hold it (the whole vocabulary is start = 0, valid = V).
TRIPOD_HD int64_t embedding_row(int32_t id, int64_t start, int64_t valid) {
  const int64_t row = static_cast<int64_t>(id) - start;
  return row >= 0 && row < valid ? row : -1;
}

// How many classes the token gradient splits the table rows into: a power of two (the class is
// row & (classes - 1)) giving about kTokenGradThreads threads, never more classes than rows and
// at most kMaxTokenGradClasses (each thread reads every token id, so more classes cost more reads).
constexpr int64_t kTokenGradThreads = 32768;
constexpr int64_t kMaxTokenGradClasses = 64;
TRIPOD_HD int64_t token_grad_classes(int64_t channels, int64_t valid) {
  int64_t classes = 1;
  while (classes < kMaxTokenGradClasses && classes * channels < kTokenGradThreads && 2 * classes <= valid) classes *= 2;
  return classes;
}

// dwte[row, c] += dout[n, c] for every token n, in order, whose row is in the window and in class
// `cls`. dwte: [valid, C], dout: [n_tokens, C], tokens: [n_tokens].
template <typename T>
TRIPOD_HD void token_grad_column(T* dwte, const T* dout, const int32_t* tokens, int64_t n_tokens, int64_t channels,
                                 int64_t start, int64_t valid, int64_t classes, int64_t cls, int64_t c) {
  for (int64_t n = 0; n < n_tokens; ++n) {
    const int64_t row = embedding_row(tokens[n], start, valid);
    if (row < 0 || (row & (classes - 1)) != cls) continue;
    dwte[row * channels + c] += dout[n * channels + c];
  }
}

// dwpe[t, c] += dout[n, c] for n = t, t + seq_len, ... < n_tokens, in order; one rounding per
// addition, as the CPU's repeated dwpe[t, c] += ... (the running value is the same sequence).
template <typename T>
TRIPOD_HD void position_grad_element(T* dwpe, const T* dout, int64_t n_tokens, int64_t seq_len, int64_t channels,
                                     int64_t t, int64_t c) {
  T acc = dwpe[t * channels + c];
  for (int64_t n = t; n < n_tokens; n += seq_len) acc += dout[n * channels + c];
  dwpe[t * channels + c] = acc;
}

}  // namespace tripod::kernels
