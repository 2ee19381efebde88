#include "core/counter_rng.h"

#include <cmath>
#include <numbers>

#include <xxhash.h>

namespace tripod {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // Philox4x32 multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

// 53 random bits from two 32-bit words, mapped into the open interval (0, 1).
inline double to_unit(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return (static_cast<double>(bits & ((1ull << 53) - 1)) + 0.5) / 9007199254740992.0;
}

}  // namespace

CounterRng::CounterRng(uint64_t seed, std::string_view stream_name)
    : key_(XXH64(stream_name.data(), stream_name.size(), seed)) {}

std::array<uint32_t, 4> CounterRng::block(uint64_t index) const {
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u};
  uint32_t k0 = static_cast<uint32_t>(key_), k1 = static_cast<uint32_t>(key_ >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

double CounterRng::uniform(uint64_t index) const {
  auto b = block(index);
  return to_unit(b[0], b[1]);
}

double CounterRng::normal(uint64_t index) const {
  auto b = block(index);
  double u1 = to_unit(b[0], b[1]), u2 = to_unit(b[2], b[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace tripod
