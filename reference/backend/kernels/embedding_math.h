// Token and position embedding arithmetic (backend/cuda/kernels/embedding.cu), forward and a
// backward that is bit-identical to cpu::embedding_backward(_window) without atomics.
//
// Why it is bit-identical: the CPU adds, for every element dwte[row, c] and dwpe[t, c], the dout
// elements of its tokens one at a time in token order, starting from the element's value. The
// device does the same additions in the same order, only with different elements in parallel:
//   token gradient     the token indices are sorted by table row (token_sort_key; a stable radix
//                      sort, so each row's tokens stay in token order), and the first position of
//                      each row's run adds the run: token_run_column, one writer per dwte[row, c].
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

// The key the token gradient sorts token ids by: the id's row in the window, or `valid` (after
// every row) for an id the window does not hold, whose tokens then add nothing.
TRIPOD_HD int64_t token_sort_key(int32_t id, int64_t start, int64_t valid) {
  const int64_t row = embedding_row(id, start, valid);
  return row < 0 ? valid : row;
}

// dwte_row[c] += dout[n, c] for the run's tokens n = run_tokens[0 .. run_length), in that order
// (token order: the sort is stable), one rounding per addition as the CPU's repeated +=.
// dwte_row: the run's row of dwte [valid, C]; dout: [n_tokens, C].
template <typename T>
TRIPOD_HD void token_run_column(T* dwte_row, const T* dout, const int32_t* run_tokens, int64_t run_length,
                                int64_t channels, int64_t c) {
  T acc = dwte_row[c];
  for (int64_t j = 0; j < run_length; ++j) acc += dout[static_cast<int64_t>(run_tokens[j]) * channels + c];
  dwte_row[c] = acc;
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
