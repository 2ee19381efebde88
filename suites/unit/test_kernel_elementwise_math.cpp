// The elementwise kernels' arithmetic (backend/kernels/elementwise_math.h, bf16_math.h), run in
// host loops as backend/cuda/kernels/elementwise.cu runs it per element, against the CPU backend:
// GELU forward and backward, the AdamW step, and the bf16 conversions (which must match
// core/bf16.h bit for bit, the device's results being stored and compared across backends).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/bf16_math.h"
#include "backend/kernels/elementwise_math.h"
#include "core/bf16.h"
#include "core/counter_rng.h"
#include "kernel_math_test_util.h"

namespace tripod::kernels {
namespace {

using testing::kRelativeCap;
using testing::relative_difference;
using testing::uniform_values;

// ---- GELU ----

// Inputs over GELU's useful range (|x| <= 10: beyond it tanh is +-1 in fp64 too) plus signed
// zeros, tiny values and points in tanh's saturation.
template <typename T>
std::vector<T> gelu_inputs(uint64_t seed) {
  std::vector<T> x = uniform_values<T>(100003, seed, "test.gelu.x", -10, 10);
  for (T special : {T(0), T(-0.0), T(1e-30), T(-1e-30), T(30), T(-30), T(0.5), T(-3)}) x.push_back(special);
  return x;
}

// gelu_kernels.cpp is compiled with -ffast-math: its tanh is libmvec's vectorised one (a few ulps
// from glibc's scalar tanh, which the replay calls, as the device calls CUDA's), and the compiler
// may reassociate x*x*x and contract multiply-adds. So the results are not bit-identical; each
// differs by a few ulps of the terms it is made of, which sets two checks:
//   per element, in ulps of the element's terms: forward 0.5x + 0.5x tanh(...) has terms of size
//     |x|; backward dout * (0.5 (1 + th) + 0.5 x sech^2 darg) has terms of size
//     |dout| (1 + 0.5 |x| darg) (tanh's error of an ulp of 1 enters sech^2 unscaled). Measured
//     <= 1.4 ulps in fp32 and fp64; the tolerance is 8 ulps, so a constant wrong in its 4th
//     digit (0.04472 for 0.044715: 15 ulps in fp32) fails;
//   relative to the tensor's largest element, under the caps kRelativeCap (1e-12, 1e-5):
//     measured 5e-15 (fp64) and 5e-7 (fp32).
template <typename T>
void expect_gelu_matches_cpu(uint64_t seed) {
  const std::vector<T> x = gelu_inputs<T>(seed);
  const auto n = static_cast<int64_t>(x.size());
  const std::vector<T> dout = uniform_values<T>(n, seed, "test.gelu.dout", -2, 2);

  std::vector<T> want_out(x.size()), want_dinp(x.size()), got_out(x.size()), got_dinp(x.size());
  cpu::gelu_forward<T>(want_out.data(), x.data(), n);
  cpu::gelu_backward<T>(want_dinp.data(), x.data(), dout.data(), n);
  double forward_ulps = 0, backward_ulps = 0;
  const double ulp = std::numeric_limits<T>::epsilon();  // relative: an ulp of 1
  for (std::size_t i = 0; i < x.size(); ++i) {  // GeluForwardOp / GeluBackwardOp, element i
    got_out[i] = gelu_forward_value(x[i]);
    got_dinp[i] = gelu_backward_value(x[i], dout[i]);
    const double xi = std::fabs(static_cast<double>(x[i]));
    const double darg = 0.7978845608028654 * (1 + 3 * 0.044715 * xi * xi);
    const double forward_terms = std::max(xi, static_cast<double>(std::numeric_limits<T>::min()));
    const double backward_terms = std::max(std::fabs(static_cast<double>(dout[i])) * (1 + 0.5 * xi * darg),
                                           static_cast<double>(std::numeric_limits<T>::min()));
    forward_ulps = std::max(forward_ulps, std::fabs(static_cast<double>(got_out[i]) - want_out[i]) / forward_terms / ulp);
    backward_ulps =
        std::max(backward_ulps, std::fabs(static_cast<double>(got_dinp[i]) - want_dinp[i]) / backward_terms / ulp);
  }
  EXPECT_LE(forward_ulps, 8);
  EXPECT_LE(backward_ulps, 8);
  const double forward = relative_difference(got_out, want_out);
  const double backward = relative_difference(got_dinp, want_dinp);
  EXPECT_LE(forward, kRelativeCap<T>);
  EXPECT_LE(backward, kRelativeCap<T>);
  testing::record_measure("gelu_forward_ulps_of_terms", forward_ulps);
  testing::record_measure("gelu_backward_ulps_of_terms", backward_ulps);
  testing::record_measure("gelu_forward_relative_difference", forward);
  testing::record_measure("gelu_backward_relative_difference", backward);
}

TEST(KernelElementwiseMath, GeluMatchesCpuFp64) { expect_gelu_matches_cpu<double>(11); }
TEST(KernelElementwiseMath, GeluMatchesCpuFp32) { expect_gelu_matches_cpu<float>(12); }

// ---- AdamW ----

struct AdamWCase {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
};

// Several steps of cpu::adamw and of adamw_element on the same state. adamw_coefficients is the
// CPU's scalar code (fp64, rounded to T), so the coefficients are identical by construction and
// only the per-element expression can differ. It is the CPU's expression in the CPU's order, and
// the project builds with -ffp-contract=off (each product rounded before the sum that follows), so
// the host loop is the CPU bit for bit, every element of every step. Built with GCC's default
// (-ffp-contract=fast), the library, whose -march has FMA, fused a*b + c where the test, built
// without -march, did not: 36-37 % of parameters were bit-identical (99.8 % in one case), and the
// test could only bound the difference (3.6e-7 of the largest element in fp32, 6.6e-16 in fp64).
// On the device nvcc may contract (--fmad=true); the GPU test compares within a tolerance.
template <typename T>
void expect_adamw_matches_cpu(const AdamWCase& k, uint64_t seed) {
  constexpr int64_t n = 40009;
  constexpr int kSteps = 5;
  std::vector<T> want_p = uniform_values<T>(n, seed, "test.adamw.param", -1, 1);
  std::vector<T> want_m(n, T(0)), want_v(n, T(0));
  std::vector<T> got_p = want_p, got_m = want_m, got_v = want_v;
  for (int64_t step = 1; step <= kSteps; ++step) {
    // A new gradient each step, some large (the second moment must not be dominated by one value).
    const std::vector<T> grad = uniform_values<T>(n, seed + static_cast<uint64_t>(step), "test.adamw.grad", -3, 3);
    cpu::adamw<T>(want_p.data(), grad.data(), want_m.data(), want_v.data(), n, k.lr, k.beta1, k.beta2, k.eps,
                  k.weight_decay, step, k.grad_scale);
    const AdamWCoefficients<T> c =
        adamw_coefficients<T>(k.lr, k.beta1, k.beta2, k.eps, k.weight_decay, step, k.grad_scale);
    EXPECT_EQ(c.scaled, k.grad_scale != 1.0);
    for (int64_t i = 0; i < n; ++i) adamw_element(got_p[i], grad[i], got_m[i], got_v[i], c);  // AdamWOp, element i
    // Each side carries its own state, so later steps include any drift of the earlier ones.
    int64_t differing = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      const bool same = got_p[i] == want_p[i] && got_m[i] == want_m[i] && got_v[i] == want_v[i];
      if (!same && first < 0) first = i;
      differing += !same;
    }
    EXPECT_EQ(differing, 0) << "elements whose param, m or v differ from the CPU's at step " << step
                            << " (the first: " << first << "; relative differences param "
                            << relative_difference(got_p, want_p) << ", m " << relative_difference(got_m, want_m)
                            << ", v " << relative_difference(got_v, want_v) << ")";
  }
  // The update moved the parameters (a no-op replay must not pass against a no-op CPU).
  const std::vector<T> start = uniform_values<T>(n, seed, "test.adamw.param", -1, 1);
  EXPECT_GT(relative_difference(got_p, start), 1e-4);
}

TEST(KernelElementwiseMath, AdamWMatchesCpuUnscaledFp64) {
  expect_adamw_matches_cpu<double>({1e-3, 0.9, 0.999, 1e-8, 0.1, 1.0}, 21);
}
TEST(KernelElementwiseMath, AdamWMatchesCpuUnscaledFp32) {
  expect_adamw_matches_cpu<float>({1e-3, 0.9, 0.999, 1e-8, 0.1, 1.0}, 22);
}
TEST(KernelElementwiseMath, AdamWMatchesCpuScaledGradientsFp64) {
  expect_adamw_matches_cpu<double>({3e-4, 0.8, 0.95, 1e-6, 0.0, 0.37}, 23);
}
TEST(KernelElementwiseMath, AdamWMatchesCpuScaledGradientsFp32) {
  expect_adamw_matches_cpu<float>({3e-4, 0.8, 0.95, 1e-6, 0.01, 0.37}, 24);
}

TEST(KernelElementwiseMath, AdamWCoefficientsAreTheCpuScalars) {
  // The CPU's formulas (loss_optim_kernels.cpp), step 3, rounded to fp32.
  const auto c = adamw_coefficients<float>(1e-3, 0.9, 0.999, 1e-8, 0.1, 3, 2.0);
  EXPECT_EQ(c.decay, static_cast<float>(1.0 - 1e-3 * 0.1));
  EXPECT_EQ(c.step_size, static_cast<float>(1e-3 / (1.0 - std::pow(0.9, 3.0))));
  EXPECT_EQ(c.bc2_sqrt, static_cast<float>(std::sqrt(1.0 - std::pow(0.999, 3.0))));
  EXPECT_EQ(c.beta1, 0.9f);
  EXPECT_EQ(c.beta2, 0.999f);
  EXPECT_EQ(c.eps, 1e-8f);
  EXPECT_EQ(c.grad_scale, 2.0f);
  EXPECT_TRUE(c.scaled);
  EXPECT_FALSE((adamw_coefficients<double>(1e-3, 0.9, 0.999, 1e-8, 0.1, 3, 1.0).scaled));
}

// ---- bf16 conversions: bit for bit against core/bf16.h ----

uint16_t core_bits(float f) { return float_to_bf16(f).bits; }
uint16_t core_bits(double d) { return double_to_bf16(d).bits; }

// The bf16 nearest to d, ties to even, found without any of the code under test: bisection over
// the bf16 magnitudes (monotonic in their bits, 0 .. 0x7F80 = infinity) for the two around |d|,
// then the nearer by fp64 subtraction, which is exact here (Sterbenz: the operands are within a
// factor of 2, or one is 0). Above bf16's largest value the upper neighbour is 2^128 (infinity).
uint16_t nearest_bf16_reference(double d) {
  if (std::isnan(d)) return std::signbit(d) ? 0xFFC0u : 0x7FC0u;
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0u;
  const double a = std::fabs(d);
  auto value = [](uint16_t bits) { return static_cast<double>(std::bit_cast<float>(uint32_t{bits} << 16)); };
  uint16_t lo = 0, hi = 0x7F80;
  if (a >= value(hi)) return static_cast<uint16_t>(hi | sign);
  while (hi - lo > 1) {
    const auto mid = static_cast<uint16_t>((lo + hi) / 2);
    (value(mid) <= a ? lo : hi) = mid;
  }
  const double above = hi == 0x7F80 ? std::ldexp(1.0, 128) : value(hi);
  const double to_below = a - value(lo), to_above = above - a;
  const uint16_t bits = to_below < to_above ? lo : (to_above < to_below ? hi : ((lo & 1u) ? hi : lo));
  return static_cast<uint16_t>(bits | sign);
}

// Doubles that catch each step of the fp64 path: exact ties between two bf16 values (must go to
// even), ties nudged by much less than an fp32 ulp (a double rounding through the nearest fp32
// would land on the tie and go to even, wrongly: round-to-odd is needed), values rounding to an
// fp32 above them, fp32 subnormal range, overflow, NaNs of both signs, infinities, fp64 subnormals.
std::vector<double> hard_doubles() {
  std::vector<double> d = {0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, std::numeric_limits<double>::quiet_NaN(),
                           -std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::signaling_NaN(),
                           std::bit_cast<double>(0xFFF0000000000001ull), std::bit_cast<double>(0x7FF0000000000001ull),
                           std::numeric_limits<double>::max(), -std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::denorm_min(), -std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::min(), 1e-300, -1e-300,
                           static_cast<double>(std::numeric_limits<float>::max()),
                           std::ldexp(1.0, 128), std::ldexp(1.0, 128) - std::ldexp(1.0, 100),
                           static_cast<double>(std::numeric_limits<float>::denorm_min()),
                           static_cast<double>(std::numeric_limits<float>::denorm_min()) / 2,
                           static_cast<double>(std::numeric_limits<float>::denorm_min()) * 0.75,
                           static_cast<double>(std::numeric_limits<float>::denorm_min()) / 3};
  const CounterRng rng(5, "test.bf16.hard");
  for (uint64_t i = 0; i < 20000; ++i) {
    const auto block = rng.block(i);
    // A random bf16 value (any exponent, subnormals included, no inf/NaN), then the tie above it.
    auto bits = static_cast<uint16_t>(block[0] & 0x7FFFu);
    if ((bits & 0x7F80u) == 0x7F80u) bits = static_cast<uint16_t>(bits & 0x7F7Fu);
    const double lo = std::bit_cast<float>(uint32_t{bits} << 16);
    const double hi = std::bit_cast<float>((uint32_t{bits} + 1u) << 16);  // may be inf: 2^128 used instead
    const double above = std::isinf(hi) ? std::ldexp(1.0, 128) : hi;
    const double tie = lo + (above - lo) / 2;  // exact: one more bit than bf16 has
    const double sign = (block[1] & 1u) ? -1.0 : 1.0;
    const double nudge = std::ldexp(tie, -40);  // far less than half an fp32 ulp of the tie
    for (double v : {tie, tie + nudge, tie - nudge, lo + nudge, above - nudge}) d.push_back(sign * v);
  }
  return d;
}

TEST(KernelElementwiseMath, Bf16FromFp64MatchesCoreBitForBitOnHardCases) {
  int64_t mismatches = 0, reference_mismatches = 0;
  for (double d : hard_doubles()) {
    const uint16_t got = double_to_bf16_bits(d);
    mismatches += got != core_bits(d);
    reference_mismatches += got != nearest_bf16_reference(d);
    if (got != core_bits(d) || got != nearest_bf16_reference(d))
      ADD_FAILURE() << "d = " << d << " (bits " << std::hex << std::bit_cast<uint64_t>(d) << "): kernel " << got
                    << ", core " << core_bits(d) << ", nearest " << nearest_bf16_reference(d) << std::dec;
    if (mismatches + reference_mismatches > 20) break;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(reference_mismatches, 0);
}

TEST(KernelElementwiseMath, Bf16FromFp32MatchesCoreAroundEveryRoundingBoundary) {
  // Every bf16 value's fp32 neighbourhood: exactly on it, just above, just below the halfway
  // point, on it (a tie), just above it, and the largest low half. All 2^16 high halves: both
  // signs, subnormals, the overflow to infinity (0x7F7F + a tie or more), infinities, every NaN
  // class (quiet, signalling with payload only in the dropped half).
  int64_t mismatches = 0;
  for (uint32_t high = 0; high <= 0xFFFFu; ++high)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFEu, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const float f = std::bit_cast<float>((high << 16) | low);
      if (float_to_bf16_bits(f) != core_bits(f) && ++mismatches <= 10)
        ADD_FAILURE() << "fp32 bits " << std::hex << ((high << 16) | low) << ": kernel " << float_to_bf16_bits(f)
                      << ", core " << core_bits(f) << std::dec;
    }
  EXPECT_EQ(mismatches, 0);
  // Spot checks of the rule itself (independent of core/bf16.h): ties to even, overflow, NaN kept.
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x3F808000u)), 0x3F80u);  // tie, even below
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x3F818000u)), 0x3F82u);  // tie, odd below: up
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x7F7F8000u)), 0x7F80u);  // rounds up to infinity
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0xFF800001u)), 0xFFC0u);  // -sNaN -> -qNaN
}

TEST(KernelElementwiseMath, Bf16ConversionsMatchCoreOnRandomBitPatterns) {
  // 2^22 random fp32 and fp64 bit patterns each, through the CPU backend's convert kernel
  // (core/bf16.h per element). Random fp64 bits mostly overflow or vanish in bf16, so half the
  // fp64 patterns get an exponent inside bf16's range (and a little beyond it on both sides).
  constexpr int64_t n = int64_t{1} << 22;
  const CounterRng rng(7, "test.bf16.random");
  std::vector<float> f(n);
  std::vector<double> d(n);
  for (int64_t i = 0; i < n; ++i) {
    const auto b = rng.block(static_cast<uint64_t>(i));
    f[i] = std::bit_cast<float>(b[0]);
    uint64_t bits = (uint64_t{b[1]} << 32) | b[2];
    if (b[3] & 1u) {  // exponent in [1023 - 140, 1023 + 130): fp32 subnormals to overflow
      const uint64_t exponent = 1023 - 140 + b[3] % 270;
      bits = (bits & 0x800FFFFFFFFFFFFFull) | (exponent << 52);
    }
    d[i] = std::bit_cast<double>(bits);
  }
  std::vector<bf16> want_f(n), want_d(n);
  cpu::convert<float, bf16>(f.data(), want_f.data(), n);
  cpu::convert<double, bf16>(d.data(), want_d.data(), n);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool bad_f = float_to_bf16_bits(f[i]) != want_f[i].bits;  // ConvertOp<float, bf16>
    const bool bad_d = double_to_bf16_bits(d[i]) != want_d[i].bits;  // ConvertOp<double, bf16>
    if ((bad_f || bad_d) && ++mismatches <= 10)
      ADD_FAILURE() << "pattern " << i << std::hex << ": fp32 " << std::bit_cast<uint32_t>(f[i]) << " fp64 "
                    << std::bit_cast<uint64_t>(d[i]) << std::dec;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(KernelElementwiseMath, Bf16ToFloatIsExactForEveryPattern) {
  // All 2^16 patterns, as the widening ConvertOp<bf16, To> does it, against cpu::convert.
  std::vector<bf16> all(65536);
  for (uint32_t b = 0; b <= 0xFFFFu; ++b) all[b].bits = static_cast<uint16_t>(b);
  std::vector<float> want_f(all.size());
  std::vector<double> want_d(all.size());
  cpu::convert<bf16, float>(all.data(), want_f.data(), 65536);
  cpu::convert<bf16, double>(all.data(), want_d.data(), 65536);
  std::vector<float> got_f(all.size());
  std::vector<double> got_d(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    got_f[i] = bf16_bits_to_float(all[i].bits);
    got_d[i] = static_cast<double>(bf16_bits_to_float(all[i].bits));
    EXPECT_EQ(bf16_bits_nonfinite(all[i].bits), !std::isfinite(got_f[i])) << std::hex << i;
  }
  EXPECT_TRUE(testing::bits_equal(got_f, want_f));
  EXPECT_TRUE(testing::bits_equal(got_d, want_d));
}

// The vectorised fp32 -> bf16 conversion (elementwise.cu's ConvertFloatToBf16x4Op) stores 4 floats
// as two packed words: in memory they must be the 4 bf16 conversions in order, bit for bit.
TEST(KernelElementwiseMath, PackedBf16PairsAreTheElementsInOrder) {
  const std::vector<float> x = {1.0f + 1.0f / 256, -3.0e38f, 1e-40f, -0.0f, std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), 0.1f, -7.0f};
  for (std::size_t i = 0; i + 1 < x.size(); i += 2) {
    const uint32_t word = float_pair_to_bf16_word(x[i], x[i + 1]);
    uint16_t halves[2];
    std::memcpy(halves, &word, sizeof word);  // as a little-endian store lays it out
    EXPECT_EQ(halves[0], float_to_bf16(x[i]).bits) << i;
    EXPECT_EQ(halves[1], float_to_bf16(x[i + 1]).bits) << i + 1;
  }
}

}  // namespace
}  // namespace tripod::kernels
