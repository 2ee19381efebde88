// bfloat16 conversions with IEEE round-to-nearest-even, exactly as GPUs convert (cvt.rn.bf16.f32):
// ties go to the even value, overflow gives infinity, subnormals round like normals, a NaN stays
// a (quiet) NaN with its sign. fp64 converts directly (not through a rounded fp32, which would
// round twice): first to fp32 with round-to-odd, whose 16 extra bits make the second rounding exact.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace tripod {

inline float bf16_to_float(bf16 h) { return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16); }

inline bf16 float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};  // quiet NaN
  // Adding 0x7FFF plus the lowest kept bit carries into the kept bits exactly when the dropped
  // half is above one half, or equal to it with an odd kept part: round to nearest, ties to even.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

inline bf16 double_to_bf16(double d) {
  if (std::isnan(d)) return bf16{static_cast<uint16_t>(std::signbit(d) ? 0xFFC0u : 0x7FC0u)};
  float f = static_cast<float>(d);  // nearest, but may round twice when followed by float_to_bf16
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    // Round to odd instead: truncate toward zero, then set the lowest bit to mark "inexact".
    uint32_t u = std::bit_cast<uint32_t>(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) u -= 1;
    f = std::bit_cast<float>(u | 1u);
  }
  return float_to_bf16(f);
}

}  // namespace tripod
