// bfloat16 conversions for host and device, on the raw 16 bits (core/dtype.h's bf16 is a struct
// holding them). The algorithm is core/bf16.h's, step for step, in integer bit manipulation rather
// than cuda_bf16.h intrinsics, so that the unit test (test_kernel_elementwise_math.cpp) proves the
// device's results bit for bit against core/bf16.h on the host:
//   fp32 -> bf16  round to nearest even by adding 0x7FFF plus the lowest kept bit; a NaN stays a
//                 quiet NaN with its sign and payload top bits; overflow rounds to infinity.
//   fp64 -> bf16  fp64 -> fp32 rounded to odd (truncate, set the lowest bit if inexact), then as
//                 fp32: the 16 extra bits of the fp32 make the second rounding exact.
//   bf16 -> fp32  exact (the bits are the upper half of an fp32).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/kernels/host_device.h"

namespace tripod::kernels {

// Bit casts through memcpy: defined behaviour in C++17, a register move on the device and the host.
TRIPOD_HD uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
TRIPOD_HD float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
TRIPOD_HD uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

TRIPOD_HD float bf16_bits_to_float(uint16_t bits) { return float_from_bits(static_cast<uint32_t>(bits) << 16); }

TRIPOD_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // The carry reaches the kept bits exactly when the dropped half is above one half, or equal to
  // it with an odd kept part: round to nearest, ties to even.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

TRIPOD_HD uint16_t double_to_bf16_bits(double d) {
  const uint64_t u = double_bits(d);
  const bool negative = (u >> 63) != 0;
  if ((u & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull)
    return static_cast<uint16_t>(negative ? 0xFFC0u : 0x7FC0u);  // canonical quiet NaN, as core/bf16.h
  float f = static_cast<float>(d);  // round to nearest; rounding again to bf16 could round twice
  const uint32_t fu = float_bits(f);
  const bool finite = (fu & 0x7F800000u) != 0x7F800000u;
  if (finite && static_cast<double>(f) != d) {
    // Round to odd: truncate toward zero (one fp32 ulp back if nearest went away from zero, which
    // for a finite f never crosses zero or an exponent boundary wrongly: the bits are monotonic in
    // magnitude), then set the lowest bit to record "inexact".
    uint32_t truncated = fu;
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) truncated -= 1;
    f = float_from_bits(truncated | 1u);
  }
  return float_to_bf16_bits(f);
}

// Two consecutive elements rounded to bf16 and packed as one 32-bit word, the first in the low half
// (a little-endian store: GPUs and x86): the vectorised fp32 -> bf16 conversion stores two of these
// (8 bytes) for every 16-byte load of four floats.
TRIPOD_HD uint32_t float_pair_to_bf16_word(float first, float second) {
  return static_cast<uint32_t>(float_to_bf16_bits(first)) | (static_cast<uint32_t>(float_to_bf16_bits(second)) << 16);
}

// Infinite or NaN: the exponent is all ones.
TRIPOD_HD bool bf16_bits_nonfinite(uint16_t bits) { return (bits & 0x7F80u) == 0x7F80u; }

}  // namespace tripod::kernels
