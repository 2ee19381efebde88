// Causal attention's arithmetic (backend/kernels/attention_math.h, row_reduce_math.h), replayed on
// the host as backend/cuda/kernels/attention.cu runs it with kAttentionThreads = 128, against
// cpu::attention_forward / attention_backward (OpenBLAS GEMMs and a softmax loop).
//   forward, per query row (b, h, t): s_j = butterfly(strided_dot_partial(q_t, k_j, hd, lane, 32))
//     * attention_scale (a warp per key j <= t); row max and exp sum by block_reduce_in_device_order
//     over strided_max_partial / exp_in_place_partial; p_j = e_j / sum, probs[b,h,t,j] = p_j for
//     j <= t and 0 past t (the CPU's causal mask); out_t[d] = combine_parts of
//     weighted_rows_partial over v_0..v_t, parts = weighted_sum_parts(hd, 128).
//   backward, rows kernel per (b, h, t): dp_j = dout_t . v_j (a warp per j), row_dot = block
//     reduce of strided_dot_partial(p, dp), ds_j = softmax_backward_score, dq_t = sum_j ds_j k_j;
//   columns kernel per (b, h, j): dk_j = sum_{t >= j} ds[t, j] q_t, dv_j = sum_{t >= j} p[t, j] dout_t.
//
// Tolerances, relative to each output's largest element (out, probs, and dq, dk, dv separately):
// the caps kRelativeCap (1e-12 fp64, 1e-5 fp32). The replay's sums run in other orders than
// OpenBLAS's (blocked, FMA) dot products, over at most max(T, hd) = 64 terms of size ~1, so the
// difference is a few ulps of the largest partial sums (measured <= 1.2e-15 in fp64, <= 5e-7 in
// fp32); a wrong row, key, scale or mask is off by >= 1e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/row_reduce_math.h"
#include "kernel_math_test_util.h"

namespace tripod::kernels {
namespace {

using testing::kRelativeCap;
using testing::relative_difference;

constexpr int kAttentionThreads = 128;  // attention.cu

struct Shape {
  int64_t batch, seq_len, n_head, head_dim;
  int64_t channels() const { return n_head * head_dim; }
  int64_t ld() const { return 3 * channels(); }
  int64_t qkv_offset(int64_t b, int64_t h) const { return b * seq_len * ld() + h * head_dim; }
  int64_t out_offset(int64_t b, int64_t h) const { return b * seq_len * channels() + h * head_dim; }
  std::string str() const {
    return "B=" + std::to_string(batch) + " T=" + std::to_string(seq_len) + " H=" + std::to_string(n_head) +
           " hd=" + std::to_string(head_dim);
  }
  std::string key() const {  // for the XML record
    return "B" + std::to_string(batch) + "_T" + std::to_string(seq_len) + "_H" + std::to_string(n_head) + "_hd" +
           std::to_string(head_dim);
  }
};

// attention.cu's weighted_rows: dst[d] = sum_{begin <= i < end} w[i] x[i * ld + d], by threads
// (part, d) and their parts combined in part order (one part: each thread its own columns).
template <typename T>
void weighted_rows_in_device_order(T* dst, const T* w, const T* x, int64_t ld, int64_t begin, int64_t end,
                                   int64_t head_dim) {
  const int parts = weighted_sum_parts(head_dim, kAttentionThreads);
  if (parts == 1) {
    for (int64_t d = 0; d < head_dim; ++d) dst[d] = weighted_rows_partial(w, x, ld, begin, end, d, 0, 1);
    return;
  }
  T partials[kAttentionThreads];  // the block's scratch: parts * hd <= threads
  for (int tid = 0; tid < kAttentionThreads; ++tid) {
    const int part = static_cast<int>(tid / head_dim);
    const int64_t d = tid % head_dim;
    if (part < parts) partials[part * head_dim + d] = weighted_rows_partial(w, x, ld, begin, end, d, part, parts);
  }
  for (int64_t d = 0; d < head_dim; ++d) dst[d] = combine_parts(partials, head_dim, parts, d);
}

// attention.cu's dot_rows: row[j] = scale * (vec . x_j) for j <= last, each a warp's butterfly.
template <typename T>
void dot_rows_in_device_order(T* row, const T* vec, const T* x, int64_t ld, int64_t last, int64_t head_dim, T scale) {
  for (int64_t j = 0; j <= last; ++j) {
    T lanes[kWarpLanes];
    for (int lane = 0; lane < kWarpLanes; ++lane)
      lanes[lane] = strided_dot_partial(vec, x + j * ld, head_dim, lane, kWarpLanes);
    row[j] = warp_butterfly_in_device_order(lanes, SumOf{}) * scale;
  }
}

// A block's reduction of per-thread values (softmax_block_reduce.cuh).
template <typename T, class ThreadValue, class Combine>
T block_reduce(const ThreadValue& thread_value, Combine combine) {
  T values[kAttentionThreads];
  for (int tid = 0; tid < kAttentionThreads; ++tid) values[tid] = thread_value(tid);
  return block_reduce_in_device_order(values, kAttentionThreads, combine);
}

template <typename T>
void forward_in_device_order(const Shape& s, const std::vector<T>& qkv, std::vector<T>& out, std::vector<T>& probs) {
  const int64_t T_ = s.seq_len, C = s.channels(), ld = s.ld(), hd = s.head_dim;
  const T scale = attention_scale<T>(hd);
  std::vector<T> row(static_cast<std::size_t>(T_));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.n_head; ++h)
      for (int64_t t = 0; t < T_; ++t) {
        const T* q = qkv.data() + s.qkv_offset(b, h);
        const std::vector<T> vec(q + t * ld, q + t * ld + hd);
        dot_rows_in_device_order(row.data(), vec.data(), q + C, ld, t, hd, scale);
        const int64_t n = t + 1;
        const T row_max =
            block_reduce<T>([&](int tid) { return strided_max_partial(row.data(), n, tid, kAttentionThreads); }, MaxOf{});
        const T denom = block_reduce<T>(
            [&](int tid) { return exp_in_place_partial(row.data(), n, row_max, tid, kAttentionThreads); }, SumOf{});
        T* p = probs.data() + ((b * s.n_head + h) * T_ + t) * T_;
        for (int64_t j = 0; j < T_; ++j) {
          if (j < n) row[j] /= denom;
          p[j] = j < n ? row[j] : T(0);
        }
        weighted_rows_in_device_order(out.data() + s.out_offset(b, h) + t * C, row.data(), q + 2 * C, ld, 0, n, hd);
      }
}

template <typename T>
void backward_in_device_order(const Shape& s, const std::vector<T>& qkv, const std::vector<T>& dout,
                              const std::vector<T>& probs, std::vector<T>& dqkv) {
  const int64_t T_ = s.seq_len, C = s.channels(), ld = s.ld(), hd = s.head_dim;
  const T scale = attention_scale<T>(hd);
  std::vector<T> dscores(probs.size()), row(static_cast<std::size_t>(T_));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.n_head; ++h) {
      const T* q = qkv.data() + s.qkv_offset(b, h);
      T* dq = dqkv.data() + s.qkv_offset(b, h);
      const int64_t bh = b * s.n_head + h;
      for (int64_t t = 0; t < T_; ++t) {  // attention_backward_rows_kernel
        const T* d = dout.data() + s.out_offset(b, h) + t * C;
        const std::vector<T> vec(d, d + hd);
        dot_rows_in_device_order(row.data(), vec.data(), q + 2 * C, ld, t, hd, T(1));
        const int64_t n = t + 1;
        const T* p = probs.data() + (bh * T_ + t) * T_;
        const T row_dot = block_reduce<T>(
            [&](int tid) { return strided_dot_partial(p, row.data(), n, tid, kAttentionThreads); }, SumOf{});
        T* ds = dscores.data() + (bh * T_ + t) * T_;
        for (int64_t j = 0; j < T_; ++j) {
          if (j < n) row[j] = softmax_backward_score(p[j], row[j], row_dot, scale);
          ds[j] = j < n ? row[j] : T(0);
        }
        weighted_rows_in_device_order(dq + t * ld, row.data(), q + C, ld, 0, n, hd);
      }
      const T* ds = dscores.data() + bh * T_ * T_;
      const T* p = probs.data() + bh * T_ * T_;
      for (int64_t j = 0; j < T_; ++j) {  // attention_backward_columns_kernel
        for (int64_t t = j; t < T_; ++t) row[t] = ds[t * T_ + j];
        weighted_rows_in_device_order(dq + C + j * ld, row.data(), q, ld, j, T_, hd);
        for (int64_t t = j; t < T_; ++t) row[t] = p[t * T_ + j];
        weighted_rows_in_device_order(dq + 2 * C + j * ld, row.data(), dout.data() + s.out_offset(b, h), C, j, T_, hd);
      }
    }
}

// The columns [part * C, (part + 1) * C) of every row of dqkv [B*T, 3C]: dq, dk or dv.
template <typename T>
std::vector<T> third(const std::vector<T>& dqkv, int64_t rows, int64_t channels, int part) {
  std::vector<T> out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), dqkv.begin() + r * 3 * channels + part * channels,
               dqkv.begin() + r * 3 * channels + (part + 1) * channels);
  return out;
}

std::vector<Shape> shapes() {
  std::vector<Shape> all;
  for (int64_t seq_len : {1, 7, 64})
    for (int64_t head_dim : {1, 8, 64})
      for (int64_t n_head : {1, 3}) all.push_back({2, seq_len, n_head, head_dim});
  // Head sizes whose weighted sums leave threads idle (48: 2 parts of 48 columns, 32 threads idle)
  // or loop (160: one part, threads take columns d and d + 128).
  all.push_back({1, 33, 2, 48});
  all.push_back({1, 9, 1, 160});
  return all;
}

template <typename T>
void expect_attention_matches_cpu(uint64_t seed) {
  for (const Shape& s : shapes()) {
    const int64_t rows = s.batch * s.seq_len, C = s.channels();
    const std::vector<T> qkv = testing::uniform_values<T>(rows * 3 * C, seed, "test.attention.qkv", -2, 2);
    const std::vector<T> dout = testing::uniform_values<T>(rows * C, seed, "test.attention.dout", -1, 1);
    const auto n_probs = static_cast<std::size_t>(s.batch * s.n_head * s.seq_len * s.seq_len);

    std::vector<T> want_out(rows * C), want_probs(n_probs), got_out(rows * C, T(-9)), got_probs(n_probs, T(-9));
    cpu::attention_forward<T>(want_out.data(), want_probs.data(), qkv.data(), s.batch, s.seq_len, C, s.n_head);
    forward_in_device_order(s, qkv, got_out, got_probs);
    const double d_out = relative_difference(got_out, want_out), d_probs = relative_difference(got_probs, want_probs);
    EXPECT_LE(d_out, kRelativeCap<T>) << "out, " << s.str();
    EXPECT_LE(d_probs, kRelativeCap<T>) << "probs, " << s.str();
    int64_t masked_nonzero = 0;  // the causal mask: exactly 0 past the diagonal, as the CPU stores it
    for (std::size_t i = 0; i < n_probs; ++i) {
      const int64_t t = static_cast<int64_t>(i) / s.seq_len % s.seq_len, j = static_cast<int64_t>(i) % s.seq_len;
      masked_nonzero += j > t && (got_probs[i] != T(0) || want_probs[i] != T(0));
    }
    EXPECT_EQ(masked_nonzero, 0) << s.str();

    // Backward from the CPU's probabilities (both read the same saved ones); it overwrites dqkv.
    std::vector<T> want_dqkv(qkv.size(), T(5)), got_dqkv(qkv.size(), T(-5));
    cpu::attention_backward<T>(want_dqkv.data(), dout.data(), qkv.data(), want_probs.data(), s.batch, s.seq_len, C,
                               s.n_head);
    backward_in_device_order(s, qkv, dout, want_probs, got_dqkv);
    double worst_grad = 0;
    for (int part = 0; part < 3; ++part) {
      const double d = relative_difference(third(got_dqkv, rows, C, part), third(want_dqkv, rows, C, part));
      EXPECT_LE(d, kRelativeCap<T>) << "d" << "qkv"[part] << ", " << s.str();
      worst_grad = std::max(worst_grad, d);
    }
    testing::record_measure("out_" + s.key(), d_out);
    testing::record_measure("probs_" + s.key(), d_probs);
    testing::record_measure("dqkv_" + s.key(), worst_grad);
  }
}

TEST(KernelAttentionMath, ForwardAndBackwardMatchCpuFp32) { expect_attention_matches_cpu<float>(141); }
TEST(KernelAttentionMath, ForwardAndBackwardMatchCpuFp64) { expect_attention_matches_cpu<double>(142); }

TEST(KernelAttentionMath, WeightedSumPartsAndSharedMemory) {
  EXPECT_EQ(weighted_sum_parts(64, kAttentionThreads), 2);  // GPT-2's head size
  EXPECT_EQ(weighted_sum_parts(1, kAttentionThreads), 128);
  EXPECT_EQ(weighted_sum_parts(48, kAttentionThreads), 2);
  EXPECT_EQ(weighted_sum_parts(128, kAttentionThreads), 1);
  EXPECT_EQ(weighted_sum_parts(160, kAttentionThreads), 1);
  for (int64_t hd = 1; hd <= 512; ++hd)  // the parts' scratch fits the block's `threads` elements
    EXPECT_LE(weighted_sum_parts(hd, kAttentionThreads) * std::min<int64_t>(hd, kAttentionThreads),
              kAttentionThreads) << hd;
  EXPECT_EQ(attention_shared_elements(1024, 64, kAttentionThreads), 1024 + 64 + 128);
  // The scale is 1/sqrt(hd) rounded as the CPU rounds it.
  EXPECT_EQ(attention_scale<float>(64), 0.125f);
  EXPECT_EQ(attention_scale<double>(48), 1.0 / std::sqrt(48.0));
}

}  // namespace
}  // namespace tripod::kernels
