// Shared helpers of the kernel-arithmetic tests (test_kernel_*_math.cpp): those tests run the
// TRIPOD_HD functions of backend/kernels/*_math.h in host loops, in the order the CUDA kernels
// use them, and compare with the CPU backend. Here: random buffers, the comparisons (bit for bit,
// or relative to a tensor's largest element), the tolerance caps, and the column-sum order shared
// by bias_grad and LayerNorm's weight gradients (backend/cuda/kernels/column_sums.cuh).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "backend/kernels/reduction_math.h"
#include "core/counter_rng.h"

namespace tripod::testing {

// The caps every tolerance of these tests stays under, relative to the compared tensor's largest
// element: about 10^4 ulps of fp64 and 10^2 ulps of fp32. They bound what a different summation
// order (device tree vs CPU loop) and the device's FMA contraction can change; a wrong index, a
// lost or doubled term, or a wrong expression moves results by far more.
template <typename T>
constexpr double kRelativeCap = sizeof(T) == 8 ? 1e-12 : 1e-5;

// n values uniform in [lo, hi), a pure function of (seed, stream, index).
template <typename T>
std::vector<T> uniform_values(int64_t n, uint64_t seed, std::string_view stream, double lo, double hi) {
  const CounterRng rng(seed, stream);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<T>(lo + (hi - lo) * rng.uniform(static_cast<uint64_t>(i)));
  return v;
}

// n ids uniform in [lo, hi) (hi - lo small against 2^53, so the rounding of uniform() is harmless).
inline std::vector<int32_t> uniform_ids(int64_t n, uint64_t seed, std::string_view stream, int64_t lo, int64_t hi) {
  const CounterRng rng(seed, stream);
  std::vector<int32_t> ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto offset = static_cast<int64_t>(rng.uniform(static_cast<uint64_t>(i)) * static_cast<double>(hi - lo));
    ids[static_cast<std::size_t>(i)] = static_cast<int32_t>(lo + std::min(offset, hi - lo - 1));
  }
  return ids;
}

template <typename T>
double largest_magnitude(const std::vector<T>& v) {
  double m = 0;
  for (T x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// max_i |got[i] - want[i]|; infinity when the sizes differ or a difference is NaN (a NaN must
// never pass a comparison).
template <typename T>
double largest_difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

// largest_difference relative to max_i |want[i]| (the absolute difference when want is all zero).
template <typename T>
double relative_difference(const std::vector<T>& got, const std::vector<T>& want) {
  const double worst = largest_difference(got, want), scale = largest_magnitude(want);
  return scale > 0 ? worst / scale : worst;
}

// Same length and the same bytes (NaN payloads, signed zeros and all).
template <typename T>
bool bits_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A measured difference, kept in the test's XML record (--gtest_output=xml) so that a run shows
// how far inside its tolerance each comparison is.
inline void record_measure(const std::string& what, double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  ::testing::Test::RecordProperty(what, text);
}

// The column sums of column_sums.cuh, replayed: the rows split into chunks of kColumnChunkRows;
// in each chunk, warp w (of kColumnSumWarps) sums term(r, c) over the chunk's rows r = first + w,
// first + w + W, ... in order, from 0, and the warps' partials are added in warp order starting
// from warp 0's; the chunks' partials are then added in chunk order starting from chunk 0's (one
// chunk: its partial is the total). Columns never mix, so the strip and grid loops do not change
// any column's order. Returns the totals [channels] that the kernel's finish() adds into the
// gradient.
template <typename T, class Term>
std::vector<T> column_sums_in_device_order(const Term& term, int64_t rows, int64_t channels) {
  constexpr int kWarps = kernels::kColumnSumWarps;
  const int64_t chunks = kernels::column_chunks(rows);
  std::vector<T> totals(static_cast<std::size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    T total = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t first = chunk * kernels::kColumnChunkRows;
      const int64_t end = std::min(rows, first + kernels::kColumnChunkRows);
      T warp_sums[kWarps];
      for (int w = 0; w < kWarps; ++w) {
        T sum = 0;
        for (int64_t r = first + w; r < end; r += kWarps) sum += term(r, c);
        warp_sums[w] = sum;
      }
      T chunk_total = warp_sums[0];
      for (int w = 1; w < kWarps; ++w) chunk_total += warp_sums[w];
      total = chunk == 0 ? chunk_total : total + chunk_total;
    }
    totals[static_cast<std::size_t>(c)] = total;
  }
  return totals;
}

}  // namespace tripod::testing
