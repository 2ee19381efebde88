// The deterministic reductions (backend/cuda/kernels/reductions.cu, reduction_math.h), replayed on
// the host in the device's order and compared with the CPU backend: sum of squares (gradient
// norm), non-finite counts, the valid-loss sum, and the column sums of bias_grad.
//
// The scalar replay: reduce_blocks(n) blocks of kReduceThreads threads; thread g of G = blocks *
// kReduceThreads sums strided_sum(term, n, g, G); each block combines its threads as
// warp_reduce.cuh's block_sum does (each warp's xor butterfly, then warp 0's butterfly over the
// warp totals, lanes past the last warp holding 0); with more than one block, one block of
// kMaxReduceBlocks threads combines the partials (0 past the last) the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/reduction_math.h"
#include "backend/kernels/row_reduce_math.h"
#include "core/counter_rng.h"
#include "kernel_math_test_util.h"

namespace tripod::kernels {
namespace {

using testing::kRelativeCap;
using testing::uniform_values;

constexpr double kUnitRoundoff = 0x1p-53;  // fp64

// warp_reduce.cuh's block_sum<threads> over one value per thread.
double block_sum_in_device_order(const double* thread_values, int threads) {
  const int warps = threads / kWarpLanes;
  double warp_totals[kWarpLanes] = {};  // lanes >= warps read 0
  for (int w = 0; w < warps; ++w) {
    double lanes[kWarpLanes];
    std::copy(thread_values + w * kWarpLanes, thread_values + (w + 1) * kWarpLanes, lanes);
    warp_totals[w] = warp_butterfly_in_device_order(lanes, SumOf{});
  }
  return warp_butterfly_in_device_order(warp_totals, SumOf{});
}

// What reduce_to_scalar leaves in *out (which held `out`) for sum_{i < n} term(i).
template <class Term>
double two_pass_sum_in_device_order(const Term& term, int64_t n, double out, bool accumulate) {
  const int64_t blocks = reduce_blocks(n);
  const int64_t stride = blocks * kReduceThreads;
  std::vector<double> partials(static_cast<std::size_t>(kMaxReduceBlocks), 0.0);  // finish_sums: 0 past `blocks`
  double thread_sums[kReduceThreads];
  for (int64_t b = 0; b < blocks; ++b) {  // partial_sums_kernel, block b
    for (int t = 0; t < kReduceThreads; ++t) thread_sums[t] = strided_sum(term, n, b * kReduceThreads + t, stride);
    partials[static_cast<std::size_t>(b)] = block_sum_in_device_order(thread_sums, kReduceThreads);
  }
  const double total = blocks == 1 ? partials[0]  // the first pass wrote the result itself
                                   : block_sum_in_device_order(partials.data(), static_cast<int>(kMaxReduceBlocks));
  return accumulate ? out + total : total;
}

// The longest chain of fp64 additions any term goes through in the replay (the forward error of a
// sum is at most height * u * sum |terms|, to first order): its thread's strided chain, five
// butterfly levels for the warp and five for the warp totals, the same again in the second pass,
// and the final += into the accumulator.
int64_t device_height(int64_t n) {
  const int64_t blocks = reduce_blocks(n), stride = blocks * kReduceThreads;
  return (n + stride - 1) / stride + 10 + (blocks > 1 ? 10 : 0) + 1;
}

const int64_t kSizes[] = {1, 255, 2048, 2049, 100003, 3000017};  // 3000017 > 1024 blocks' worth: threads loop

// ---- sum of squares: CpuBackend::sum_squares does *acc += cpu::sum_squares(x, n) ----

// cpu::sum_squares adds, per 4096-element block, 8 interleaved lanes of up to 512 squares, the 8
// lanes in order, then the blocks in order; the backend adds that to the accumulator. With fp64
// input a square is rounded, and the device may fuse it into its addition (one rounding less; the
// host does not: -ffp-contract=off): one more u. So |device - CPU| <= (h_device + h_cpu + 1) u (|acc| + sum x^2), the bound asserted
// (with 1% for the second-order terms); a lost, doubled or wrong term changes the sum by ~1/n of
// it, far beyond. Measured differences are also held under the cap kRelativeCap (1e-12).
template <typename T>
void expect_sum_squares_matches_cpu(int64_t n, uint64_t seed) {
  const std::vector<T> x = uniform_values<T>(n, seed, "test.reduce.squares", -2, 2);
  const double acc = 0.75;  // the accumulator already holds another tensor's sum
  const double got = two_pass_sum_in_device_order([&](int64_t i) { return square_term(x[i]); }, n, acc, true);
  const double want = acc + cpu::sum_squares<T>(x.data(), n);
  double magnitude = acc;
  for (T v : x) magnitude += static_cast<double>(v) * static_cast<double>(v);
  const int64_t cpu_height = 512 + 8 + (n + 4095) / 4096 + 1;
  const double bound = 1.01 * static_cast<double>(device_height(n) + cpu_height + 1) * kUnitRoundoff * magnitude;
  EXPECT_LE(std::fabs(got - want), bound) << "n = " << n;
  EXPECT_LE(std::fabs(got - want), kRelativeCap<double> * magnitude) << "n = " << n;
  testing::record_measure("relative_difference_n" + std::to_string(n), std::fabs(got - want) / magnitude);
}

TEST(KernelReductionMath, SumSquaresMatchesCpuFp32) {
  for (int64_t n : kSizes) expect_sum_squares_matches_cpu<float>(n, 31);
}
TEST(KernelReductionMath, SumSquaresMatchesCpuFp64) {
  for (int64_t n : kSizes) expect_sum_squares_matches_cpu<double>(n, 32);
}

// ---- non-finite counts: exact (each term is 0 or 1, every partial an integer below 2^53) ----

// Random bit patterns (1 in 256 fp32 / bf16 patterns and 1 in 2048 fp64 ones have the all-ones
// exponent: infinities and NaNs of every sign and payload), plus a NaN at the first element and an
// infinity at the last (the ends of the strided loops).
template <typename T>
std::vector<T> random_patterns(int64_t n, uint64_t seed) {
  const CounterRng rng(seed, "test.reduce.patterns");
  std::vector<T> x(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto b = rng.block(static_cast<uint64_t>(i));
    if constexpr (sizeof(T) == 8) x[i] = std::bit_cast<T>((uint64_t{b[0]} << 32) | b[1]);
    else if constexpr (sizeof(T) == 4) x[i] = std::bit_cast<T>(b[0]);
    else x[i].bits = static_cast<uint16_t>(b[0]);
  }
  if constexpr (sizeof(T) == 2) {
    x.front().bits = 0xFFC1u;  // -NaN
    x.back().bits = 0x7F80u;   // +inf
  } else {
    x.front() = -std::numeric_limits<T>::quiet_NaN();
    x.back() = std::numeric_limits<T>::infinity();
  }
  return x;
}

template <typename T>
void expect_nonfinite_count_matches_cpu(uint64_t seed) {
  for (int64_t n : kSizes) {
    const std::vector<T> x = random_patterns<T>(n, seed + static_cast<uint64_t>(n));
    double got;
    if constexpr (sizeof(T) == 2)
      got = two_pass_sum_in_device_order([&](int64_t i) { return nonfinite_bf16_term(x[i].bits); }, n, 2.0, true);
    else
      got = two_pass_sum_in_device_order([&](int64_t i) { return nonfinite_term(x[i]); }, n, 2.0, true);
    const int64_t want = cpu::count_nonfinite<T>(x.data(), n);
    EXPECT_EQ(got, 2.0 + static_cast<double>(want)) << "n = " << n;  // the accumulator held 2
    EXPECT_GE(want, n == 1 ? 1 : 2);  // at least the planted ones
  }
}

TEST(KernelReductionMath, NonfiniteCountMatchesCpuExactlyFp32) { expect_nonfinite_count_matches_cpu<float>(41); }
TEST(KernelReductionMath, NonfiniteCountMatchesCpuExactlyFp64) { expect_nonfinite_count_matches_cpu<double>(42); }
TEST(KernelReductionMath, NonfiniteCountMatchesCpuExactlyBf16) { expect_nonfinite_count_matches_cpu<bf16>(43); }

TEST(KernelReductionMath, NonfiniteTermsAreDecidedByTheExponentBits) {
  EXPECT_EQ(nonfinite_term(std::numeric_limits<float>::max()), 0.0);
  EXPECT_EQ(nonfinite_term(std::numeric_limits<float>::denorm_min()), 0.0);
  EXPECT_EQ(nonfinite_term(-std::numeric_limits<float>::infinity()), 1.0);
  EXPECT_EQ(nonfinite_term(std::bit_cast<float>(0x7F800001u)), 1.0);  // signalling NaN
  EXPECT_EQ(nonfinite_term(std::numeric_limits<double>::max()), 0.0);
  EXPECT_EQ(nonfinite_term(std::bit_cast<double>(0xFFF8000000000000ull)), 1.0);
  EXPECT_EQ(nonfinite_bf16_term(0x7F7Fu), 0.0);  // bf16's largest finite value
  EXPECT_EQ(nonfinite_bf16_term(0xFF80u), 1.0);
  EXPECT_EQ(nonfinite_bf16_term(0x7F81u), 1.0);
}

// ---- the valid-loss sum: cpu::sum_valid_losses overwrites, adding in token order ----

// The CPU adds the valid losses one by one (height n); the bound is (h_device + n) u sum |loss|, as
// for the squares. Ignored rows hold NaN: a selected, never multiplied, term keeps it out.
template <typename T>
void expect_valid_loss_sum_matches_cpu(uint64_t seed) {
  for (int64_t n : kSizes) {
    std::vector<T> losses = uniform_values<T>(n, seed, "test.reduce.losses", 0, 11);
    std::vector<int32_t> targets = testing::uniform_ids(n, seed, "test.reduce.targets", -1, 5);  // 1 in 6 ignored
    targets[0] = -7;  // any negative id is ignored
    double magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (targets[i] < 0) losses[i] = std::numeric_limits<T>::quiet_NaN();
      else magnitude += static_cast<double>(losses[i]);
    }
    const double got =
        two_pass_sum_in_device_order([&](int64_t i) { return valid_loss_term(losses[i], targets[i]); }, n, 1e9, false);
    const double want = cpu::sum_valid_losses<T>(losses.data(), targets.data(), n);
    ASSERT_TRUE(std::isfinite(got)) << "n = " << n;
    const double bound = 1.01 * static_cast<double>(device_height(n) + n) * kUnitRoundoff * magnitude;
    EXPECT_LE(std::fabs(got - want), bound) << "n = " << n;
    EXPECT_LE(std::fabs(got - want), kRelativeCap<double> * std::max(magnitude, 1.0)) << "n = " << n;
    testing::record_measure("relative_difference_n" + std::to_string(n),
                            std::fabs(got - want) / std::max(magnitude, 1.0));
  }
}

TEST(KernelReductionMath, ValidLossSumMatchesCpuFp32) { expect_valid_loss_sum_matches_cpu<float>(51); }
TEST(KernelReductionMath, ValidLossSumMatchesCpuFp64) { expect_valid_loss_sum_matches_cpu<double>(52); }

// ---- the order depends on n only ----

TEST(KernelReductionMath, BlockCountDependsOnlyOnTheElementCount) {
  EXPECT_EQ(reduce_blocks(0), 1);
  EXPECT_EQ(reduce_blocks(1), 1);
  EXPECT_EQ(reduce_blocks(kReduceThreads * kReduceItemsPerThread), 1);  // 2048: one block writes the result
  EXPECT_EQ(reduce_blocks(kReduceThreads * kReduceItemsPerThread + 1), 2);
  EXPECT_EQ(reduce_blocks(kReduceThreads * kReduceItemsPerThread * kMaxReduceBlocks), kMaxReduceBlocks);
  EXPECT_EQ(reduce_blocks(kReduceThreads * kReduceItemsPerThread * kMaxReduceBlocks + 1), kMaxReduceBlocks);
  EXPECT_EQ(reduce_blocks(int64_t{1} << 40), kMaxReduceBlocks);  // 64-bit sizes
}

TEST(KernelReductionMath, EveryElementIsSummedOnceByExactlyOneThread) {
  // A term that counts its calls: strided_sum's four-at-a-time loop and its remainder must visit
  // each index once, for every size (the remainder lengths 0..3 and the capped grid included).
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{255}, int64_t{2048}, int64_t{2049}, int64_t{8195},
                    int64_t{100003}, int64_t{3000017}}) {
    std::vector<int> visits(static_cast<std::size_t>(n), 0);
    int* counts = visits.data();
    const double total = two_pass_sum_in_device_order(
        [counts](int64_t i) {
          ++counts[i];
          return 1.0;
        },
        n, 0.0, false);
    EXPECT_EQ(total, static_cast<double>(n));
    EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), n) << "n = " << n;
  }
}

TEST(KernelReductionMath, ReplayIsReproducibleAndNotASequentialSum) {
  // The same values give the same bits every time (the order is fixed by n); and the order is
  // really the tree, not index order: on values whose sum depends on the order, the replay
  // differs from the sequential sum (else the comparisons above would not test the order).
  const int64_t n = 100003;
  const std::vector<double> x = uniform_values<double>(n, 61, "test.reduce.order", -1, 1);
  auto term = [&](int64_t i) { return x[i] * 1e6 + 1e-3; };
  const double first = two_pass_sum_in_device_order(term, n, 0.0, false);
  const double second = two_pass_sum_in_device_order(term, n, 0.0, false);
  EXPECT_EQ(std::bit_cast<uint64_t>(first), std::bit_cast<uint64_t>(second));
  double sequential = 0;
  for (int64_t i = 0; i < n; ++i) sequential += term(i);
  EXPECT_NE(first, sequential);
}

// ---- column sums (bias_grad): dbias[c] += the totals of column_sums_in_device_order ----

// The CPU adds the rows one by one into dbias[c]; the device adds, in each chunk of 512 rows, each
// warp's every-16th rows and the 16 partials in order, then the chunks' partials in order (1000
// and 1537 rows: two chunks, and four with a last chunk of one row), then the total into dbias[c]. Both orders have random-signed rounding
// errors of about u per addition, so the difference is ~sqrt(rows) u times the partial sums'
// size: measured up to 9e-7 of the largest element in fp32 and 3e-15 in fp64 at 1000 rows, under
// the caps kRelativeCap (1e-5, 1e-12); a lost or doubled row moves a column by ~1/sqrt(rows).
template <typename T>
void expect_bias_grad_matches_cpu(uint64_t seed) {
  for (int64_t rows : {1, 5, 64, 1000, 1537})
    for (int64_t channels : {1, 7, 33, 769}) {
      const std::vector<T> dout = uniform_values<T>(rows * channels, seed, "test.reduce.dout", -1, 1);
      std::vector<T> want = uniform_values<T>(channels, seed, "test.reduce.dbias", -1, 1);  // accumulates
      std::vector<T> got = want;
      cpu::bias_grad<T>(want.data(), dout.data(), rows, channels);
      const std::vector<T> totals = testing::column_sums_in_device_order<T>(
          [&](int64_t r, int64_t c) { return dout[r * channels + c]; }, rows, channels);
      for (int64_t c = 0; c < channels; ++c) got[c] += totals[c];  // BiasGradColumns::finish
      const double d = testing::relative_difference(got, want);
      EXPECT_LE(d, kRelativeCap<T>) << rows << " x " << channels;
      testing::record_measure("relative_difference_" + std::to_string(rows) + "x" + std::to_string(channels), d);
    }
}

TEST(KernelReductionMath, ColumnSumsMatchCpuBiasGradFp32) { expect_bias_grad_matches_cpu<float>(71); }
TEST(KernelReductionMath, ColumnSumsMatchCpuBiasGradFp64) { expect_bias_grad_matches_cpu<double>(72); }

}  // namespace
}  // namespace tripod::kernels
