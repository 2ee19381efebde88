// The arithmetic of the causal attention kernels (backend/cuda/kernels/attention.cu), written once
// for the device and for the host replay in suites/unit/test_kernel_attention_math.cpp.
//
// Layout (the CPU backend's): qkv[B,T,3C] holds q | k | v; head h of each is columns
// [h*hd, (h+1)*hd) of its third, hd = C / H; a row of any of them is `ld` = 3C elements after the
// previous one (dout and out: ld = C). Every kernel works on one row of a (b, h) pair's T x T
// matrix at a time, in two shapes of work:
//   * a dot product of a vector in shared memory with hd-element rows in global memory, one warp
//     per row: lane l sums elements d = l, l + 32, ... (coalesced), the warp's butterfly adds the
//     32 partials (row_reduce_math.h);
//   * a weighted sum of rows, out[d] = sum_i w[i] * x[i][d]: thread (part, d) sums rows
//     i = begin + part, begin + part + parts, ... (adjacent threads read adjacent d), and the parts
//     are added in part order. parts = threads / hd (at least 1) keeps the block busy when hd is
//     small (GPT-2: hd = 64, 128 threads, parts = 2).
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/host_device.h"

namespace tripod::kernels {

// 1/sqrt(hd), rounded as the CPU backend rounds it (a correctly rounded sqrt and division, as
// CUDA's default -prec-sqrt / -prec-div give).
template <typename T>
TRIPOD_HD T attention_scale(int64_t head_dim) {
  return static_cast<T>(1) / std::sqrt(static_cast<T>(head_dim));
}

// One share of the dot product a . x over n elements: indices first, first + stride, ... in
// ascending order (a lane of a warp: first = lane, stride = 32; a thread of a block's row
// reduction: first = thread, stride = threads).
template <typename T>
TRIPOD_HD T strided_dot_partial(const T* a, const T* x, int64_t n, int64_t first, int64_t stride) {
  T sum = 0;
  for (int64_t d = first; d < n; d += stride) sum += a[d] * x[d];
  return sum;
}

// The softmax numerators of a thread's share of a row, in place: row[j] = exp(row[j] - row_max)
// for j = tid, tid + threads, ... < n; returns their sum in ascending j.
template <typename T>
TRIPOD_HD T exp_in_place_partial(T* row, int64_t n, T row_max, int64_t tid, int64_t threads) {
  T sum = 0;
  for (int64_t j = tid; j < n; j += threads) {
    row[j] = std::exp(row[j] - row_max);
    sum += row[j];
  }
  return sum;
}

// How many threads share each output column of a weighted sum of hd-element rows.
TRIPOD_HD int weighted_sum_parts(int64_t head_dim, int threads) {
  const int64_t parts = threads / head_dim;
  return parts > 1 ? static_cast<int>(parts) : 1;
}

// Part `part` of `parts` of sum_{begin <= i < end} w[i] * x[i * ld + d], in ascending i.
template <typename T>
TRIPOD_HD T weighted_rows_partial(const T* w, const T* x, int64_t ld, int64_t begin, int64_t end, int64_t d,
                                  int part, int parts) {
  T sum = 0;
  for (int64_t i = begin + part; i < end; i += parts) sum += w[i] * x[i * ld + d];
  return sum;
}

// The parts of column d (partials[part * hd + d]) added in part order.
template <typename T>
TRIPOD_HD T combine_parts(const T* partials, int64_t head_dim, int parts, int64_t d) {
  T sum = partials[d];
  for (int part = 1; part < parts; ++part) sum += partials[part * head_dim + d];
  return sum;
}

// Softmax backward of one score, the CPU's expression: dscore = p * (dp - sum_j p_j dp_j) * scale.
template <typename T>
TRIPOD_HD T softmax_backward_score(T prob, T dprob, T row_dot, T scale) {
  return prob * (dprob - row_dot) * scale;
}

// Dynamic shared memory of every attention kernel, in elements: a row of T scores (or a column of
// T probabilities), an hd-element vector, and `threads` elements of scratch (the reductions' warp
// results and the weighted sums' parts). The largest T a device holds follows from its opt-in
// limit: with 227 KiB, T <= 58112 - hd - 128 in fp32, T <= 29056 - hd - 128 in fp64.
TRIPOD_HD int64_t attention_shared_elements(int64_t seq_len, int64_t head_dim, int threads) {
  return seq_len + head_dim + threads;
}

}  // namespace tripod::kernels
