// The arithmetic of the causal softmax rows of attention (backend/cuda/kernels/attention.cu), and
// its head-major copies' indexing, written once for the device and for the host replay in
// suites/unit/test_attention_gemms.cpp.
//
// Layout: the scores, probabilities and their gradients are [B,H,T,T], row (b, h, t) holding key
// columns j = 0..T-1 of which j <= t are kept (the causal mask). A block of
// kAttentionSoftmaxThreads threads takes a row; thread i owns the columns j = i, i + threads, ...
// and every sum or max over the row is its threads' partials combined by the block reduction of
// row_reduce_math.h.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/host_device.h"
#include "backend/kernels/row_reduce_math.h"

namespace tripod::kernels {

inline constexpr int kAttentionSoftmaxThreads = 128;

// 1/sqrt(hd), rounded as the CPU backend rounds it (a correctly rounded sqrt and division, as
// CUDA's default -prec-sqrt / -prec-div give).
template <typename T>
TRIPOD_HD T attention_scale(int64_t head_dim) {
  return static_cast<T>(1) / std::sqrt(static_cast<T>(head_dim));
}

// One share of the dot product a . x over n elements: indices first, first + stride, ... in
// ascending order (a thread of a block's row reduction: first = thread, stride = threads).
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

// The first query row of causal row block r of `blocks` (r = blocks: T): the split both backends'
// attention products use, so that block r's products stop at key causal_block_begin(r + 1).
TRIPOD_HD int64_t causal_block_begin(int64_t r, int64_t seq_len, int64_t blocks) { return r * seq_len / blocks; }

// One past the last key column that any product reads in query row t: the end of t's row block
// (the block's products take keys [0, causal_block_begin(r + 1)), and the transposed dkey and
// dvalue products of key block c <= r read row t's columns below causal_block_begin(c + 1)). The
// softmax rows write their GEMM-operand scratch only this far: columns past it are never read, so
// at T = 1024 in 4 blocks, 3/8 of each square is neither written nor read.
TRIPOD_HD int64_t causal_block_end(int64_t t, int64_t seq_len, int64_t blocks) {
  int64_t r = 1;
  while (r < blocks && causal_block_begin(r, seq_len, blocks) <= t) ++r;
  return causal_block_begin(r, seq_len, blocks);
}

// Where element i of a head-major copy [parts][B][H][T][hd] lives in its token-major tensor
// [B][T][parts * C] (C = H * hd: qkv with parts = 3, out and dout with parts = 1). The CUDA
// attention copies qkv and dout into head-major form so that every (b, h) pair's [T, hd] matrix
// is contiguous and a product is one uniformly strided batch (backend/cuda/host/attention_gemms.h).
TRIPOD_HD int64_t token_major_index(int64_t i, int64_t batch, int64_t seq_len, int64_t n_head, int64_t head_dim,
                                    int64_t parts) {
  const int64_t d = i % head_dim;
  int64_t rest = i / head_dim;
  const int64_t t = rest % seq_len;
  rest /= seq_len;
  const int64_t h = rest % n_head;
  rest /= n_head;
  const int64_t b = rest % batch, part = rest / batch;
  return ((b * seq_len + t) * parts + part) * (n_head * head_dim) + h * head_dim + d;
}

// ---- the fp32 softmax rows in registers (attention.cu's grouped kernels) ----
// Where a row is whole 16-byte groups of 4 fp32 columns (T % 4 == 0) and fits
// kAttentionSoftmaxThreads * 4 * kSoftmaxMaxGroups columns, each thread loads its groups once with
// 16-byte accesses and keeps them in registers: thread tid owns groups tid, tid + threads, ...;
// slot s of its values is column owned_column(tid, threads, s). Its partials run over its slots in
// order (ascending columns), masked to the row's causal length n; slots past its groups map to
// columns >= T and add nothing, so a host replay may use more slots than the kernel.
inline constexpr int kSoftmaxGroupWidth = 4;
inline constexpr int kSoftmaxMaxGroups = 8;

// Groups a thread holds for a row of seq_len fp32 columns (1, 2, 4 or 8), or 0 where the grouped
// kernels do not apply (the strided ones above run instead).
TRIPOD_HD int softmax_groups_per_thread(int64_t seq_len, int64_t threads) {
  if (seq_len <= 0 || seq_len % kSoftmaxGroupWidth != 0) return 0;
  for (int groups = 1; groups <= kSoftmaxMaxGroups; groups *= 2)
    if (kSoftmaxGroupWidth * threads * groups >= seq_len) return groups;
  return 0;
}

TRIPOD_HD int64_t owned_column(int64_t tid, int64_t threads, int slot) {
  return kSoftmaxGroupWidth * (tid + (slot / kSoftmaxGroupWidth) * threads) + slot % kSoftmaxGroupWidth;
}

template <typename T, int kSlots>
TRIPOD_HD T owned_max_partial(const T* v, int64_t tid, int64_t threads, int64_t n) {
  T m = -static_cast<T>(INFINITY);
  TRIPOD_UNROLL
  for (int s = 0; s < kSlots; ++s)
    if (owned_column(tid, threads, s) < n) m = max_of(m, v[s]);
  return m;
}

// v[s] = exp(v[s] - row_max) on the slots inside the row; returns their sum in slot order.
template <typename T, int kSlots>
TRIPOD_HD T owned_exp_in_place_partial(T* v, T row_max, int64_t tid, int64_t threads, int64_t n) {
  T sum = 0;
  TRIPOD_UNROLL
  for (int s = 0; s < kSlots; ++s)
    if (owned_column(tid, threads, s) < n) {
      v[s] = std::exp(v[s] - row_max);
      sum += v[s];
    }
  return sum;
}

template <typename T, int kSlots>
TRIPOD_HD T owned_dot_partial(const T* a, const T* x, int64_t tid, int64_t threads, int64_t n) {
  T sum = 0;
  TRIPOD_UNROLL
  for (int s = 0; s < kSlots; ++s)
    if (owned_column(tid, threads, s) < n) sum += a[s] * x[s];
  return sum;
}

// The inverse of token_major_index: where column `col` of token row `token_row` (b * T + t) of a
// token-major tensor [B*T][parts * C] lives in its head-major copy [parts][B][H][T][hd]. The
// copies by token rows (attention.cu) index with it, four columns at a time when hd % 4 == 0 (a
// group of four never straddles a head, so its four elements are adjacent in both layouts).
TRIPOD_HD int64_t head_major_index(int64_t token_row, int64_t col, int64_t batch, int64_t seq_len, int64_t n_head,
                                   int64_t head_dim) {
  const int64_t channels = n_head * head_dim;
  const int64_t b = token_row / seq_len, t = token_row % seq_len;
  const int64_t part = col / channels, within = col % channels;
  const int64_t h = within / head_dim, d = within % head_dim;
  return (((part * batch + b) * n_head + h) * seq_len + t) * head_dim + d;
}

// head_major_index as a column's term plus a token row's, for a loop down the rows of one column
// (the column sums of reductions.cu: the column's term is computed once, and a row's takes one
// 32-bit division instead of head_major_index's four 64-bit ones):
// head_major_index(row, col, ...) == column_offset(col) + row_offset(row). Rows below 2^31.
struct HeadMajorOffsets {
  int64_t batch, seq_len, n_head, head_dim;
  TRIPOD_HD int64_t column_offset(int64_t col) const {
    const int64_t channels = n_head * head_dim, part = col / channels, within = col % channels;
    return (part * batch * n_head + within / head_dim) * seq_len * head_dim + within % head_dim;
  }
  TRIPOD_HD int64_t row_offset(int64_t token_row) const {
    const auto row = static_cast<uint32_t>(token_row), t_len = static_cast<uint32_t>(seq_len);
    const uint32_t b = row / t_len, t = row - b * t_len;
    return (static_cast<int64_t>(b) * n_head * seq_len + t) * head_dim;
  }
};

// Softmax backward of one score, the CPU's expression: dscore = p * (dp - sum_j p_j dp_j) * scale.
template <typename T>
TRIPOD_HD T softmax_backward_score(T prob, T dprob, T row_dot, T scale) {
  return prob * (dprob - row_dot) * scale;
}

}  // namespace tripod::kernels
