// Softmax cross-entropy's arithmetic (backend/kernels/cross_entropy_math.h with the row reductions
// of row_reduce_math.h), replayed on the host as backend/cuda/kernels/cross_entropy.cu runs it: a
// block of kSoftmaxThreads = 256 threads per row; row max = block_reduce_in_device_order over the
// threads' strided_max_partial (MaxOf); exp sum likewise over strided_exp_sum_partial (SumOf);
// logsumexp_from; loss = cross_entropy_loss; each gradient element cross_entropy_grad. Compared
// with cpu::cross_entropy_forward / backward (whole vocabulary) and with the window kernels
// (logits_row_max, logits_exp_sums, cross_entropy_from_sums, cross_entropy_backward_window) over
// three windows of GPT-2's 50257 ids, padded columns, ignored targets and targets held by
// another window, at logit magnitudes ~4, ~100 and ~1000 (exp of an unshifted logit overflows);
// and the one-pass max and sum (logits_stats_kernel) against the two passes.
//
// Tolerances, relative to the compared tensor's largest element:
//   row max, target logits          exact (a max and a copy: no rounding);
//   losses and lse from the same sums, gradient from the same lse: bit-identical (the CPU's
//                                    expressions in the CPU's order, the same libm calls);
//   exp sums, losses                kRelativeCap (1e-12 fp64, 1e-5 fp32): the sums' order differs
//                                    (256 strided partials and a tree vs one loop);
//   gradients                       kRelativeCap + 2 ulps of the largest |logsumexp|: each gradient
//                                    is exp(x - lse) * g, so an lse that rounds to the neighbouring
//                                    value (any summation order may do that) changes every element
//                                    by that relative amount: 6e-5 at |logits| ~ 1000 in fp32, which
//                                    no fp32 implementation can beat.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/cross_entropy_math.h"
#include "backend/kernels/row_reduce_math.h"
#include "core/bf16.h"
#include "kernel_math_test_util.h"

namespace tripod::kernels {
namespace {

using testing::bits_equal;
using testing::kRelativeCap;
using testing::relative_difference;

constexpr int kSoftmaxThreads = 256;  // cross_entropy.cu
constexpr int64_t kVocab = 50257;

// ---- the replays ----

template <typename T>
T row_max_in_device_order(const T* row, int64_t valid) {
  T partials[kSoftmaxThreads];
  for (int t = 0; t < kSoftmaxThreads; ++t) partials[t] = strided_max_partial(row, valid, t, kSoftmaxThreads);
  return block_reduce_in_device_order(partials, kSoftmaxThreads, MaxOf{});
}

template <typename T>
T exp_sum_in_device_order(const T* row, int64_t valid, T shift) {
  T partials[kSoftmaxThreads];
  for (int t = 0; t < kSoftmaxThreads; ++t) partials[t] = strided_exp_sum_partial(row, valid, shift, t, kSoftmaxThreads);
  return block_reduce_in_device_order(partials, kSoftmaxThreads, SumOf{});
}

// cross_entropy_backward_window_kernel for one row (also the whole-vocabulary backward: the window
// [0, V), no padding): the window's gradient, padding and ignored rows 0.
template <typename T>
void gradient_row_in_device_order(T* row, T lse, int32_t target, int64_t cols, int64_t start, int64_t valid, T g) {
  if (target < 0) {
    std::fill(row, row + cols, T(0));
    return;
  }
  const int64_t target_column = window_target_column(target, start, valid);
  for (int64_t j = 0; j < cols; ++j) row[j] = j < valid ? cross_entropy_grad(row[j], lse, g, j == target_column) : T(0);
}

// ---- inputs ----

template <typename T>
std::vector<T> logits(int64_t rows, int64_t cols, double magnitude, uint64_t seed) {
  return testing::uniform_values<T>(rows * cols, seed, "test.cross_entropy.logits", -magnitude, magnitude);
}

// Three windows of kWindowCols columns (vocab parallel over three ranks), the last with 2 padding
// columns.
constexpr int64_t kRanks = 3, kWindowCols = (kVocab + kRanks - 1) / kRanks;

// Random ids (rows 7, 8), the ids at every window edge (the first and last ids, the first and
// last of the middle window), a middle one, and ignored rows (-1, -100). rows >= 9.
std::vector<int32_t> targets(int64_t rows, uint64_t seed) {
  std::vector<int32_t> t = testing::uniform_ids(rows, seed, "test.cross_entropy.targets", 0, kVocab);
  t[0] = 2 * kWindowCols - 1;
  t[1] = -1;
  t[2] = kVocab / 2;
  t[3] = 0;
  t[4] = kVocab - 1;
  t[5] = kWindowCols;
  t[6] = -100;
  return t;
}

template <typename T>
double ulp_of(double x) {
  const T v = static_cast<T>(std::fabs(x));
  return static_cast<double>(std::nextafter(v, std::numeric_limits<T>::infinity()) - v);
}

template <typename T>
bool all_finite(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [](T x) { return std::isfinite(x); });
}

const double kMagnitudes[] = {4, 100, 1000};

// ---- whole vocabulary ----

template <typename T>
void expect_whole_vocabulary_matches_cpu(uint64_t seed) {
  const int64_t rows = 9;
  const double grad_scale = 1.0 / 7;  // 1 / valid tokens; not a power of 2, so the scaling rounds
  const std::vector<int32_t> t = targets(rows, seed);
  for (double magnitude : kMagnitudes) {
    const std::vector<T> x = logits<T>(rows, kVocab, magnitude, seed);
    std::vector<T> want_loss(rows), got_loss(rows);
    cpu::cross_entropy_forward<T>(want_loss.data(), x.data(), t.data(), rows, kVocab);
    std::vector<T> want_grad = x, got_grad = x;
    cpu::cross_entropy_backward<T>(want_grad.data(), t.data(), rows, kVocab, grad_scale);
    double largest_lse = 0;
    for (int64_t r = 0; r < rows; ++r) {  // cross_entropy_forward_kernel / cross_entropy_backward_kernel
      const T* row = x.data() + r * kVocab;
      const T m = row_max_in_device_order(row, kVocab);
      const T lse = logsumexp_from(m, exp_sum_in_device_order(row, kVocab, m));
      largest_lse = std::max(largest_lse, std::fabs(static_cast<double>(lse)));
      got_loss[r] = t[r] < 0 ? T(0) : cross_entropy_loss(lse, row[t[r]], t[r]);
      gradient_row_in_device_order(got_grad.data() + r * kVocab, lse, t[r], kVocab, 0, kVocab, static_cast<T>(grad_scale));
    }
    const std::string where = "|logits| <= " + std::to_string(magnitude);
    ASSERT_TRUE(all_finite(got_loss) && all_finite(got_grad)) << where;  // no overflow
    const double d_loss = relative_difference(got_loss, want_loss), d_grad = relative_difference(got_grad, want_grad);
    EXPECT_LE(d_loss, kRelativeCap<T>) << where;
    EXPECT_LE(d_grad, kRelativeCap<T> + 2 * ulp_of<T>(largest_lse)) << where;
    for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(t[r] >= 0 || got_loss[r] == T(0)) << "ignored row " << r;
    testing::record_measure("loss_" + std::to_string(static_cast<int>(magnitude)), d_loss);
    testing::record_measure("grad_" + std::to_string(static_cast<int>(magnitude)), d_grad);
  }
}

TEST(KernelCrossEntropyMath, WholeVocabularyMatchesCpuFp32) { expect_whole_vocabulary_matches_cpu<float>(121); }
TEST(KernelCrossEntropyMath, WholeVocabularyMatchesCpuFp64) { expect_whole_vocabulary_matches_cpu<double>(122); }

// ---- vocabulary windows (vocab parallel: three ranks, each cols = ceil(V / 3) columns) ----

// Each rank's logits [rows, cols]: the window's columns of the full logits, then padding filled
// with values that would show if read: a huge logit (it would become the row max) and NaNs.
template <typename T>
std::vector<T> window_logits(const std::vector<T>& full, int64_t rows, int64_t cols, int64_t start, int64_t valid) {
  std::vector<T> w(static_cast<std::size_t>(rows * cols), std::numeric_limits<T>::quiet_NaN());
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(full.begin() + r * kVocab + start, full.begin() + r * kVocab + start + valid, w.begin() + r * cols);
    if (valid < cols) w[r * cols + valid] = static_cast<T>(1e30);
  }
  return w;
}

template <typename T>
void expect_windows_match_cpu(uint64_t seed) {
  const int64_t rows = 9, ranks = kRanks, cols = kWindowCols;
  const double grad_scale = 1.0 / 7;
  const T g = static_cast<T>(grad_scale);
  const std::vector<int32_t> t = targets(rows, seed);
  for (double magnitude : kMagnitudes) {
    const std::string where = "|logits| <= " + std::to_string(magnitude);
    const std::vector<T> full = logits<T>(rows, kVocab, magnitude, seed);
    std::vector<std::vector<T>> x(ranks);
    int64_t start[kRanks], valid[kRanks];
    for (int64_t k = 0; k < ranks; ++k) {
      start[k] = k * cols;
      valid[k] = std::min(cols, kVocab - start[k]);
      x[k] = window_logits(full, rows, cols, start[k], valid[k]);
    }
    // Pass 1: each window's row max (logits_row_max_kernel), then their max (the caller's all-reduce).
    std::vector<T> want_max(rows, -INFINITY), got_max(rows, -INFINITY);
    for (int64_t k = 0; k < ranks; ++k) {
      std::vector<T> want_k(rows), got_k(rows);
      cpu::logits_row_max<T>(want_k.data(), x[k].data(), t.data(), rows, cols, valid[k], kVocab);
      for (int64_t r = 0; r < rows; ++r) got_k[r] = row_max_in_device_order(x[k].data() + r * cols, valid[k]);
      EXPECT_TRUE(bits_equal(got_k, want_k)) << "row max, window " << k << ", " << where;
      for (int64_t r = 0; r < rows; ++r) {
        want_max[r] = std::max(want_max[r], want_k[r]);
        got_max[r] = std::max(got_max[r], got_k[r]);
      }
    }
    // Pass 2: each window's exp sums and target logit (logits_exp_sums_kernel), summed over windows
    // in window order (the all-reduce; the same additions on both sides).
    std::vector<T> want_sums(2 * rows, T(0)), got_sums(2 * rows, T(0));
    for (int64_t k = 0; k < ranks; ++k) {
      std::vector<T> want_k(2 * rows), got_k(2 * rows);
      cpu::logits_exp_sums<T>(want_k.data(), x[k].data(), want_max.data(), t.data(), rows, cols, start[k], valid[k]);
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = x[k].data() + r * cols;
        got_k[r] = exp_sum_in_device_order(row, valid[k], got_max[r]);
        got_k[rows + r] = window_target_logit(row, t[r], start[k], valid[k]);
      }
      EXPECT_LE(relative_difference(std::vector<T>(got_k.begin(), got_k.begin() + rows),
                                    std::vector<T>(want_k.begin(), want_k.begin() + rows)),
                kRelativeCap<T>)
          << "exp sums, window " << k << ", " << where;
      EXPECT_TRUE(bits_equal(std::vector<T>(got_k.begin() + rows, got_k.end()),
                             std::vector<T>(want_k.begin() + rows, want_k.end())))
          << "target logits, window " << k << ", " << where;
      for (int64_t i = 0; i < 2 * rows; ++i) {
        want_sums[i] += want_k[i];
        got_sums[i] += got_k[i];
      }
    }
    // Losses and logsumexp (FromSumsOp): from the CPU's own sums, bit for bit; from the replay's, within tolerance.
    std::vector<T> want_loss(rows), want_lse(rows), same_loss(rows), same_lse(rows), got_loss(rows), got_lse(rows);
    cpu::cross_entropy_from_sums<T>(want_loss.data(), want_lse.data(), want_max.data(), want_sums.data(), t.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      same_lse[r] = logsumexp_from(want_max[r], want_sums[r]);
      same_loss[r] = cross_entropy_loss(same_lse[r], want_sums[rows + r], t[r]);
      got_lse[r] = logsumexp_from(got_max[r], got_sums[r]);
      got_loss[r] = cross_entropy_loss(got_lse[r], got_sums[rows + r], t[r]);
    }
    EXPECT_TRUE(bits_equal(same_lse, want_lse)) << where;
    EXPECT_TRUE(bits_equal(same_loss, want_loss)) << where;
    EXPECT_LE(relative_difference(got_loss, want_loss), kRelativeCap<T>) << where;
    EXPECT_LE(relative_difference(got_lse, want_lse), kRelativeCap<T>) << where;
    const double grad_tolerance = kRelativeCap<T> + 2 * ulp_of<T>(testing::largest_magnitude(want_lse));
    // Each window's gradient (cross_entropy_backward_window_kernel): from the CPU's lse bit for
    // bit (padding and ignored rows included), from the replay's lse within tolerance.
    for (int64_t k = 0; k < ranks; ++k) {
      std::vector<T> want_grad = x[k], same_grad = x[k], got_grad = x[k];
      cpu::cross_entropy_backward_window<T>(want_grad.data(), want_lse.data(), t.data(), rows, cols, start[k], valid[k],
                                            kVocab, grad_scale);
      for (int64_t r = 0; r < rows; ++r) {
        gradient_row_in_device_order(same_grad.data() + r * cols, want_lse[r], t[r], cols, start[k], valid[k], g);
        gradient_row_in_device_order(got_grad.data() + r * cols, got_lse[r], t[r], cols, start[k], valid[k], g);
      }
      EXPECT_TRUE(bits_equal(same_grad, want_grad)) << "gradient, window " << k << ", " << where;
      ASSERT_TRUE(all_finite(got_grad)) << where;
      const double d_grad = relative_difference(got_grad, want_grad);
      EXPECT_LE(d_grad, grad_tolerance) << "gradient, window " << k << ", " << where;
      testing::record_measure("grad_window" + std::to_string(k) + "_" + std::to_string(static_cast<int>(magnitude)),
                              d_grad);
    }
    testing::record_measure("loss_" + std::to_string(static_cast<int>(magnitude)),
                            relative_difference(got_loss, want_loss));
  }
}

TEST(KernelCrossEntropyMath, VocabularyWindowsMatchCpuFp32) { expect_windows_match_cpu<float>(131); }
TEST(KernelCrossEntropyMath, VocabularyWindowsMatchCpuFp64) { expect_windows_match_cpu<double>(132); }

// logits_stats_kernel (the single-device loss's max and sum in one pass): each thread's online
// state over its columns (strided_online_exp_sum), merged in the block's order (MergeExpSums).
template <typename T>
ExpSumState<T> online_stats_in_device_order(const T* row, int64_t valid) {
  ExpSumState<T> states[kSoftmaxThreads];
  for (int t = 0; t < kSoftmaxThreads; ++t) states[t] = strided_online_exp_sum(row, valid, t, kSoftmaxThreads);
  return block_reduce_in_device_order(states, kSoftmaxThreads, MergeExpSums{});
}

// Against the CPU's two passes over GPT-2's rows padded to 8 (padding that would show if read):
// the max exactly and the losses within the cap. The sums are held to the exact sum (long double)
// within the cap, as the two passes' device order is: in fp32 the CPU's own one-loop sum of 50257
// terms is about 1e-5 from the exact one, so a comparison with it would measure the CPU's rounding.
template <typename T>
void expect_online_stats_match_cpu(uint64_t seed) {
  const int64_t rows = 9, cols = (kVocab + 7) / 8 * 8;
  const std::vector<int32_t> t = targets(rows, seed);
  for (double magnitude : kMagnitudes) {
    const std::string where = "|logits| <= " + std::to_string(magnitude);
    const std::vector<T> x = window_logits(logits<T>(rows, kVocab, magnitude, seed), rows, cols, 0, kVocab);
    std::vector<T> want_max(rows), want_sums(2 * rows), got_max(rows), got_sums(rows);
    cpu::logits_row_max<T>(want_max.data(), x.data(), t.data(), rows, cols, kVocab, kVocab);
    cpu::logits_exp_sums<T>(want_sums.data(), x.data(), want_max.data(), t.data(), rows, cols, 0, kVocab);
    std::vector<T> want_loss(rows), got_loss(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const ExpSumState<T> s = online_stats_in_device_order(x.data() + r * cols, kVocab);
      got_max[r] = s.max;
      got_sums[r] = s.sum;
      want_loss[r] = cross_entropy_loss(logsumexp_from(want_max[r], want_sums[r]), want_sums[rows + r], t[r]);
      got_loss[r] = cross_entropy_loss(logsumexp_from(got_max[r], got_sums[r]), want_sums[rows + r], t[r]);
    }
    EXPECT_TRUE(bits_equal(got_max, want_max)) << where;
    std::vector<long double> exact(rows, 0.0L), two_pass(rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < kVocab; ++j)
        exact[r] += std::exp(static_cast<long double>(x[r * cols + j]) - static_cast<long double>(want_max[r]));
      two_pass[r] = exp_sum_in_device_order(x.data() + r * cols, kVocab, want_max[r]);
    }
    auto from_exact = [&](const std::vector<T>& v) {
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r)
        worst = std::max(worst, static_cast<double>(std::fabs((static_cast<long double>(v[r]) - exact[r]) / exact[r])));
      return worst;
    };
    const double d_sums = from_exact(got_sums);
    std::vector<T> two_pass_t(two_pass.begin(), two_pass.end());
    EXPECT_LE(d_sums, kRelativeCap<T>) << "exp sums, " << where << " (the two passes' device order: "
                                       << from_exact(two_pass_t) << ")";
    EXPECT_LE(relative_difference(got_loss, want_loss), kRelativeCap<T>) << "losses, " << where;
    testing::record_measure("online_sums_" + std::to_string(static_cast<int>(magnitude)), d_sums);
  }
}

TEST(KernelCrossEntropyMath, OnlineRowStatsMatchTheTwoPassesFp32) { expect_online_stats_match_cpu<float>(141); }
TEST(KernelCrossEntropyMath, OnlineRowStatsMatchTheTwoPassesFp64) { expect_online_stats_match_cpu<double>(142); }

// The merge's edges: a thread without columns adds nothing, two empty ones stay {-inf, 0} (as the
// two passes give for an empty window), a NaN never raises the max and makes the sum NaN.
TEST(KernelCrossEntropyMath, OnlineStatsOfEmptyRowsAndNans) {
  const float row[] = {1.0f, NAN, 3.0f, -2.0f};
  const ExpSumState<float> empty = online_stats_in_device_order(row, 0);
  EXPECT_EQ(empty.max, -INFINITY);
  EXPECT_EQ(empty.sum, 0.0f);
  const ExpSumState<float> with_nan = online_stats_in_device_order(row, 4);
  EXPECT_EQ(with_nan.max, 3.0f);
  EXPECT_TRUE(std::isnan(with_nan.sum));
  const ExpSumState<float> one = MergeExpSums{}(no_exp_sum_elements<float>(), ExpSumState<float>{2.0f, 1.5f});
  EXPECT_EQ(one.max, 2.0f);
  EXPECT_EQ(one.sum, 1.5f);
  // a rising max rescales what came before: {1, 1} then 3 -> sum exp(1 - 3) + 1
  const ExpSumState<float> rising = strided_online_exp_sum(row, 3, 0, 2);  // columns 0 and 2
  EXPECT_EQ(rising.max, 3.0f);
  EXPECT_EQ(rising.sum, 1.0f * std::exp(1.0f - 3.0f) + 1.0f);
  // a -inf adds nothing, as exp(-inf - max) in the two passes, also as a thread's first value
  // (exp(-inf - -inf) would be NaN)
  const float with_minus_inf[] = {-INFINITY, 1.0f, -INFINITY, 2.0f};
  const ExpSumState<float> skipped = strided_online_exp_sum(with_minus_inf, 4, 0, 1);
  EXPECT_EQ(skipped.max, 2.0f);
  EXPECT_EQ(skipped.sum, std::exp(1.0f - 2.0f) + 1.0f);
  const ExpSumState<float> only_minus_inf = strided_online_exp_sum(with_minus_inf, 3, 2, 2);  // column 2
  EXPECT_EQ(only_minus_inf.max, -INFINITY);
  EXPECT_EQ(only_minus_inf.sum, 0.0f);
  const ExpSumState<float> merged = online_stats_in_device_order(with_minus_inf, 4);
  EXPECT_EQ(merged.max, 2.0f);
  EXPECT_FALSE(std::isnan(merged.sum));
}

// The loss with its gradient walks each thread's columns back from its last: the same columns as
// the strided pass that read them, each once, for every thread of a block and any row length
// (shorter than the block, a multiple of it, GPT-2's padded 50264).
TEST(KernelCrossEntropyMath, TheWalkBackTakesEachThreadsStridedColumnsOnce) {
  const int64_t stride = 256;
  for (int64_t cols : {int64_t{0}, int64_t{1}, int64_t{97}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{512},
                       int64_t{50264}}) {
    std::vector<int> seen(static_cast<std::size_t>(cols), 0);
    for (int64_t tid = 0; tid < stride; ++tid) {
      std::vector<int64_t> forward, back;
      for (int64_t j = tid; j < cols; j += stride) forward.push_back(j);
      for (int64_t j = kernels::last_strided_column(tid, cols, stride); j >= 0; j -= stride) back.push_back(j);
      std::reverse(back.begin(), back.end());
      ASSERT_EQ(back, forward) << "thread " << tid << " of rows of " << cols;
      for (int64_t j : back) ++seen[static_cast<std::size_t>(j)];
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << cols;
  }
}

TEST(KernelCrossEntropyMath, TargetColumnsAndIgnoredTargets) {
  EXPECT_EQ(window_target_column(5, 0, 10), 5);
  EXPECT_EQ(window_target_column(15, 10, 10), 5);
  EXPECT_EQ(window_target_column(9, 10, 10), -1);   // the previous window's
  EXPECT_EQ(window_target_column(20, 10, 10), -1);  // the next window's (or padding: never a target)
  EXPECT_EQ(window_target_column(-1, 0, 10), -1);   // ignored
  const double row[] = {1.5, -2.0, 3.25};
  EXPECT_EQ(window_target_logit(row, 11, 10, 3), -2.0);
  EXPECT_EQ(window_target_logit(row, 13, 10, 3), 0.0);
  EXPECT_EQ(cross_entropy_loss(7.0, 3.0, 2), 4.0);
  EXPECT_EQ(cross_entropy_loss(7.0, 3.0, -1), 0.0);
  EXPECT_EQ(cross_entropy_grad(1.0, 1.0, 0.5, false), 0.5);  // exp(0) * g
  EXPECT_EQ(cross_entropy_grad(1.0, 1.0, 0.5, true), 0.0);   // p - 1 at the target
  EXPECT_TRUE(target_beyond_vocab(kVocab, kVocab));
  EXPECT_FALSE(target_beyond_vocab(kVocab - 1, kVocab));
  EXPECT_FALSE(target_beyond_vocab(-1, kVocab));
}

TEST(KernelCrossEntropyMath, MaxNeverChoosesNanAndEmptyWindowIsMinusInfinity) {
  // max_of keeps the running value against a NaN (a NaN logit reaches the loss through the exp
  // sum, which the caller's finite check sees); a thread or window without columns gives -inf,
  // as cpu::logits_row_max does for valid = 0.
  const float row[] = {1.0f, NAN, 3.0f, -2.0f};
  EXPECT_EQ(row_max_in_device_order(row, 4), 3.0f);
  EXPECT_TRUE(std::isnan(exp_sum_in_device_order(row, 4, 3.0f)));
  EXPECT_EQ(row_max_in_device_order(row, 0), -INFINITY);
  EXPECT_EQ(exp_sum_in_device_order(row, 0, 0.0f), 0.0f);
}

// bf16-mixed's bf16 logits: every row reduction and the target logit read a bf16 element widened,
// exactly, so their results are those of the widened fp32 row, bit for bit.
TEST(KernelCrossEntropyMath, Bf16LogitsReduceAsTheirFp32Values) {
  std::vector<bf16> row16(301);
  std::vector<float> row32(row16.size());
  for (std::size_t j = 0; j < row16.size(); ++j) {
    row16[j] = float_to_bf16(static_cast<float>(std::sin(0.37 * static_cast<double>(j)) * 9.0));
    row32[j] = bf16_to_float(row16[j]);
  }
  const int64_t n = static_cast<int64_t>(row16.size());
  for (int64_t tid = 0; tid < 5; ++tid) {
    const float m16 = strided_max_partial(row16.data(), n, tid, 5), m32 = strided_max_partial(row32.data(), n, tid, 5);
    EXPECT_EQ(m16, m32);
    EXPECT_EQ(strided_exp_sum_partial(row16.data(), n, m32, tid, 5),
              strided_exp_sum_partial(row32.data(), n, m32, tid, 5));
    const ExpSumState<float> a = strided_online_exp_sum(row16.data(), n, tid, 5);
    const ExpSumState<float> b = strided_online_exp_sum(row32.data(), n, tid, 5);
    EXPECT_EQ(a.max, b.max);
    EXPECT_EQ(a.sum, b.sum);
  }
  EXPECT_EQ(window_target_logit(row16.data(), 40, 30, 100), row32[10]);
  EXPECT_EQ(window_target_logit(row16.data(), 4, 30, 100), 0.0f);
  static_assert(std::is_same_v<Widened<bf16>, float> && std::is_same_v<Widened<double>, double>);
}

}  // namespace
}  // namespace tripod::kernels
