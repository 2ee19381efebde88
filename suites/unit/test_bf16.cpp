// bf16 rounding (core/bf16.h) against a reference written independently of it: the two nearest
// bf16 values are found by truncation and compared by distance, ties to the even one. Checked on
// millions of fp32 values (every bf16 pattern with halfway, just-off-halfway and random low bits,
// so every exponent, subnormals, infinities and NaNs) and millions of fp64 values (including those
// that a conversion through a rounded fp32 would round twice).
#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/counter_rng.h"

namespace tripod {
namespace {

bool is_nan_bits(uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0; }

// The bf16 next to `low` away from zero, as a double (the value above the largest finite bf16,
// 0x7F7F, is 2^128: where rounding to nearest overflows to infinity).
double next_away(uint16_t low) {
  if ((low & 0x7FFFu) == 0x7F7Fu) return std::copysign(std::ldexp(1.0, 128), bf16_to_float(bf16{low}));
  return bf16_to_float(bf16{static_cast<uint16_t>(low + 1)});
}

// Nearest bf16 to x given the bf16 `low` with |low| <= |x| < |next|, ties to even.
uint16_t pick_nearest(double x, uint16_t low) {
  const double lo = bf16_to_float(bf16{low}), hi = next_away(low);
  const double d_lo = std::fabs(x - lo), d_hi = std::fabs(hi - x);
  if (d_lo < d_hi || (d_lo == d_hi && (low & 1u) == 0)) return low;
  return static_cast<uint16_t>(low + 1);  // 0x7F7F + 1 = 0x7F80 = infinity, as it should
}

uint16_t reference_from_float(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return 0;  // NaNs are checked separately
  if (std::isinf(f)) return static_cast<uint16_t>(u >> 16);
  return pick_nearest(f, static_cast<uint16_t>(u >> 16));  // truncation is the bf16 at or below |f|
}

uint16_t reference_from_double(double d) {
  if (std::isinf(d)) return d > 0 ? 0x7F80u : 0xFF80u;
  // The fp32 at or below |d| (rounding toward zero), then its bf16 truncation.
  const int saved = std::fegetround();
  std::fesetround(FE_TOWARDZERO);
  volatile double dv = d;  // keep the conversion at run time, under this rounding mode
  const float toward_zero = static_cast<float>(dv);
  std::fesetround(saved);
  if (std::isinf(toward_zero)) return d > 0 ? 0x7F80u : 0xFF80u;
  return pick_nearest(d, static_cast<uint16_t>(std::bit_cast<uint32_t>(toward_zero) >> 16));
}

TEST(Bf16, EveryPatternWithHalfwayAndRandomLowBitsRoundsToNearestEven) {
  const CounterRng rng(5, "bf16.low-bits");
  std::vector<uint32_t> lows = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000};
  for (uint64_t i = 0; i < 16; ++i) lows.push_back(static_cast<uint32_t>(rng.uniform(i) * 65536.0) & 0xFFFFu);
  int64_t checked = 0, nans = 0;
  for (uint32_t high = 0; high < 65536; ++high)
    for (uint32_t low : lows) {
      const float f = std::bit_cast<float>(high << 16 | low);
      const uint16_t got = float_to_bf16(f).bits;
      if (std::isnan(f)) {
        ASSERT_TRUE(is_nan_bits(got)) << std::hex << (high << 16 | low);
        ASSERT_EQ(got & 0x8000u, high & 0x8000u) << "NaN keeps its sign";
        ++nans;
        continue;
      }
      ASSERT_EQ(got, reference_from_float(f)) << std::hex << "fp32 bits 0x" << (high << 16 | low);
      ++checked;
    }
  EXPECT_GT(checked, 1'500'000);
  EXPECT_GT(nans, 0);
}

TEST(Bf16, RandomFloatsAndSpecialValues) {
  const CounterRng rng(6, "bf16.floats");
  for (uint64_t i = 0; i < 2'000'000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng.uniform(i) * 4294967296.0);
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f).bits, reference_from_float(f)) << std::hex << bits;
  }
  EXPECT_EQ(float_to_bf16(0.0f).bits, 0x0000u);
  EXPECT_EQ(float_to_bf16(-0.0f).bits, 0x8000u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7F80u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()).bits, 0x7F80u);  // overflows when rounded
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()).bits, 0x0000u);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256).bits, 0x3F80u);  // halfway between 1 and 1+2^-7: to even (1)
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256).bits, 0x3F82u);  // halfway, odd below: up
}

TEST(Bf16, EveryBf16RoundTripsThroughFloatAndDouble) {
  for (uint32_t b = 0; b < 65536; ++b) {
    if (is_nan_bits(static_cast<uint16_t>(b))) continue;
    const bf16 h{static_cast<uint16_t>(b)};
    ASSERT_EQ(float_to_bf16(bf16_to_float(h)).bits, b);
    ASSERT_EQ(double_to_bf16(static_cast<double>(bf16_to_float(h))).bits, b);
  }
}

TEST(Bf16, DoublesRoundOnceIncludingNearTies) {
  const CounterRng rng(7, "bf16.doubles");
  int64_t checked = 0;
  for (uint64_t i = 0; i < 1'000'000; ++i) {
    // Random doubles over bf16's whole range (and a bit beyond, into overflow and underflow).
    const double mantissa = 1.0 + rng.uniform(3 * i);
    const int exponent = static_cast<int>(rng.uniform(3 * i + 1) * 290.0) - 145;
    const double d = std::ldexp(rng.uniform(3 * i + 2) < 0.5 ? -mantissa : mantissa, exponent);
    ASSERT_EQ(double_to_bf16(d).bits, reference_from_double(d)) << std::hexfloat << d;
    ++checked;
  }
  // Just above and below every halfway point between neighbouring bf16s: through a rounded fp32,
  // these would land on the halfway point itself and then round to even, the wrong way half the time.
  for (uint32_t b = 0; b < 0x7F7F; b += 3) {
    const double lo = bf16_to_float(bf16{static_cast<uint16_t>(b)});
    const double hi = bf16_to_float(bf16{static_cast<uint16_t>(b + 1)});
    const double mid = (lo + hi) / 2;  // exact in fp64
    for (double d : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), -mid, -std::nextafter(mid, 1e300)}) {
      ASSERT_EQ(double_to_bf16(d).bits, reference_from_double(d)) << std::hexfloat << d;
      ++checked;
    }
    ASSERT_EQ(double_to_bf16(std::nextafter(mid, 1e300)).bits, b + 1);
    ASSERT_EQ(double_to_bf16(std::nextafter(mid, 0.0)).bits, b);
  }
  EXPECT_GT(checked, 1'000'000);
  EXPECT_EQ(double_to_bf16(std::numeric_limits<double>::quiet_NaN()).bits & 0x7FC0u, 0x7FC0u);
  EXPECT_EQ(double_to_bf16(-std::numeric_limits<double>::quiet_NaN()).bits & 0x8000u, 0x8000u);
  EXPECT_EQ(double_to_bf16(1e300).bits, 0x7F80u);
  EXPECT_EQ(double_to_bf16(-1e-300).bits, 0x8000u);
}

}  // namespace
}  // namespace tripod
