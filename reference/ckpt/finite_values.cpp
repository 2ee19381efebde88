#include "ckpt/finite_values.h"

#include <bit>
#include <cstring>

#include "core/bf16.h"
#include "core/error.h"

namespace tripod::ckpt {

namespace {

// An IEEE value is infinite or NaN exactly when every bit of its exponent is set. Tested on the bits,
// the count vectorises: over 83 MB of fp32 it took 0.6 times as long as one of the writer's two
// XXH64 passes over them (5.4-6.3 ms against 9.1-9.3, medians of 7, on this 2-core VM); through
// std::isfinite the loop took 1.15 times as long as the pass.
template <typename Bits>
Bits bits_at(const std::byte* data, int64_t i) {
  Bits bits;
  std::memcpy(&bits, data + static_cast<std::size_t>(i) * sizeof(Bits), sizeof(Bits));
  return bits;
}

template <typename Bits, typename Value>
NonFiniteValues scan(const std::byte* data, int64_t n, Bits exponent, Value value_of) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += (bits_at<Bits>(data, i) & exponent) == exponent;
  if (count == 0) return {};
  int64_t first = 0;
  while ((bits_at<Bits>(data, first) & exponent) != exponent) ++first;
  return {count, first, value_of(bits_at<Bits>(data, first))};
}

}  // namespace

NonFiniteValues find_nonfinite(const std::byte* data, int64_t n, DType dtype) {
  switch (dtype) {
    case DType::F32:
      return scan<uint32_t>(data, n, 0x7f800000u, [](uint32_t b) { return double{std::bit_cast<float>(b)}; });
    case DType::F64:
      return scan<uint64_t>(data, n, 0x7ff0000000000000ull, [](uint64_t b) { return std::bit_cast<double>(b); });
    case DType::BF16:
      return scan<uint16_t>(data, n, uint16_t{0x7f80}, [](uint16_t b) { return double{bf16_to_float(bf16{b})}; });
    case DType::I32: return {};
  }
  return {};
}

int64_t block_logical_element(const Block& block, int64_t index) {
  return block.start + (index / block.length) * block.stride + index % block.length;
}

std::string describe_nonfinite(const std::string& tensor, const std::string& kind, const NonFiniteValues& found,
                               int64_t first_logical) {
  return str_cat("tensor '", tensor, "' (", kind, ") holds ", found.count, " infinite or NaN value",
                 found.count == 1 ? "" : "s", " (the first: element ", first_logical, ", ", found.first_value, ")");
}

}  // namespace tripod::ckpt
