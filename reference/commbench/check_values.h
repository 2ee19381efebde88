// The values `tripod bench comm` sends and the values it expects back, computed locally on every
// rank, so that every received element is checked without trusting the transport.
//
// Inputs: element `index` of group rank r is 1 + (a hash of r, index and seed) mod 61. Small positive
// integers make sums over up to ~275,000 ranks exact in float and int32, so sum, min and max are
// compared exactly; avg (a sum divided by n) is compared with a relative tolerance of a few ulps,
// since another backend may scale before summing. `index` is the element's position in the
// group-wide layout (block r of an all_gather input is indexed from r*k), so a block delivered to
// the wrong place is caught too — hashed, at every block size: as (index + 7r + 13 seed) mod 61,
// two ranks' blocks were the same values whenever block + 7 was a multiple of 61 (all_gather of
// 2^19 floats a rank: 4 MiB on 2 ranks), and two blocks of one rank whenever the block was
// (alltoall of 244 floats), so a gather that put one rank's block everywhere passed. bfloat16 sums
// are exact in fp32 and rounded once to bf16 (as every Tripod communicator reduces bf16), so they
// are compared exactly too; its avg within 1e-2.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "comm/communicator.h"
#include "core/bf16.h"

namespace tripod::commbench {

// A bf16 element as the checks compute with it: stored as core/bf16.h's bits (uploaded as they
// are), converted from a value by rounding once to nearest even, compared bit for bit.
struct Bf16Value {
  bf16 v{};
  Bf16Value() = default;
  explicit Bf16Value(double d) : v(double_to_bf16(d)) {}
  explicit operator double() const { return bf16_to_float(v); }
  Bf16Value& operator+=(Bf16Value o) { return *this = Bf16Value(double(*this) + double(o)); }
  friend Bf16Value operator/(Bf16Value a, Bf16Value b) { return Bf16Value(double(a) / double(b)); }
  friend bool operator==(Bf16Value a, Bf16Value b) { return a.v.bits == b.v.bits; }
};
static_assert(sizeof(Bf16Value) == 2, "uploaded as bf16 elements");

// splitmix64's finaliser: each input bit moves every output bit.
inline uint64_t mix_bits(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline int64_t input_value(int rank, int64_t index, int seed) {
  const uint64_t who = mix_bits((static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(seed));
  return 1 + static_cast<int64_t>(mix_bits(static_cast<uint64_t>(index) ^ who) % 61);
}

// The reduction over the group of every rank's input at `index`, computed in T as MPI does (the
// sum is exact; avg divides it once by n).
template <typename T>
T reduced_value(ReduceOp op, int n, int64_t index, int seed) {
  int64_t sum = 0, lo = input_value(0, index, seed), hi = lo;
  for (int r = 0; r < n; ++r) {
    const int64_t v = input_value(r, index, seed);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  switch (op) {
    case ReduceOp::Sum: return static_cast<T>(sum);
    case ReduceOp::Avg: return static_cast<T>(sum) / static_cast<T>(n);
    case ReduceOp::Max: return static_cast<T>(hi);
    case ReduceOp::Min: return static_cast<T>(lo);
  }
  return T{};
}

template <typename T>
bool matches(T got, T want, bool approximate) {
  if (!approximate) return got == want;
  const double tolerance = sizeof(T) == 2 ? 1e-2 : sizeof(T) == 4 ? 1e-6 : 1e-14;  // a few ulps of bf16 / float / double
  return std::abs(static_cast<double>(got) - static_cast<double>(want)) <= tolerance * std::abs(static_cast<double>(want));
}

}  // namespace tripod::commbench
