// Row reductions as the softmax kernels (attention.cu, cross_entropy.cu) do them: a row split over
// `threads` threads, element j to thread j % threads (adjacent threads read adjacent elements),
// each thread's partial in ascending j, then the partials combined by each warp's xor butterfly
// (offsets 16, 8, 4, 2, 1) and the warps' results summed in warp order
// (backend/cuda/kernels/softmax_block_reduce.cuh). The order depends only on the row length and
// the block size, never on scheduling, so the device result is reproducible; the *_in_device_order
// functions replay it on the host, where the unit tests compare it with the CPU backend.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/host_device.h"
#include "core/dtype.h"  // bf16

namespace tripod::kernels {

inline constexpr int kWarpLanes = 32;

// An element as the reductions' type: itself, or a bf16 element (bf16-mixed's logits) widened to
// fp32, exactly: the statistics of bf16 values are fp32 sums of those values.
template <typename T>
TRIPOD_HD T widened(T x) {
  return x;
}
TRIPOD_HD float widened(bf16 x) { return bf16_bits_to_float(x.bits); }
template <typename X>
using Widened = decltype(widened(X{}));

// The larger of two values as the device combines them: a NaN is never chosen (it reaches the
// result through the exp-sum that follows every max, so it is not lost).
template <typename T>
TRIPOD_HD T max_of(T a, T b) {
  return b > a ? b : a;
}

// max over x[j], j = tid, tid + threads, ... < n; -inf when the thread has no element.
template <typename X, typename T = Widened<X>>
TRIPOD_HD T strided_max_partial(const X* x, int64_t n, int64_t tid, int64_t threads) {
  T m = -static_cast<T>(INFINITY);
  for (int64_t j = tid; j < n; j += threads) m = max_of(m, widened(x[j]));
  return m;
}

// sum of exp(x[j] - shift) over j = tid, tid + threads, ... < n, in ascending j.
template <typename X, typename T>
TRIPOD_HD T strided_exp_sum_partial(const X* x, int64_t n, T shift, int64_t tid, int64_t threads) {
  T sum = 0;
  for (int64_t j = tid; j < n; j += threads) sum += std::exp(widened(x[j]) - shift);
  return sum;
}

// A row's softmax statistics in one pass: the largest value seen and the sum of exp(x - max) over
// the values seen, the sum rescaled whenever the max rises (the "online softmax"). The two-pass
// form (strided_max_partial, then strided_exp_sum_partial with the row's max) gives the same
// numbers up to rounding: exp(x - m') * exp(m' - m) here against exp(x - m) there.
// A plain aggregate (no member initializers), so that a block can keep an array of them in
// __shared__ memory, which takes no initialisation.
template <typename T>
struct ExpSumState {
  T max, sum;
};

// The state of no elements: {-inf, 0}.
template <typename T>
TRIPOD_HD ExpSumState<T> no_exp_sum_elements() {
  return {-static_cast<T>(INFINITY), static_cast<T>(0)};
}

// One thread's state over x[j], j = tid, tid + threads, ... < n, in ascending j; {-inf, 0} when
// it has no element. A NaN never raises the max and makes the sum NaN, as in the two passes. A
// -inf adds nothing (exp(-inf - max) = 0 in the two passes), also before any finite value, where
// exp(-inf - -inf) would make the sum NaN.
template <typename X, typename T = Widened<X>>
TRIPOD_HD ExpSumState<T> strided_online_exp_sum(const X* x, int64_t n, int64_t tid, int64_t threads) {
  ExpSumState<T> s = no_exp_sum_elements<T>();
  for (int64_t j = tid; j < n; j += threads) {
    const T v = widened(x[j]);
    if (v > s.max) {
      s.sum = s.sum * std::exp(s.max - v) + static_cast<T>(1);
      s.max = v;
    } else if (v != -static_cast<T>(INFINITY)) {
      s.sum += std::exp(v - s.max);
    }
  }
  return s;
}

// Two states combined: both sums rescaled to the larger max. Commutative bit for bit (the sum of
// two rounded products; unfused on the device too), so every lane of a butterfly holds the same
// result.
struct MergeExpSums {
  template <typename T>
  TRIPOD_HD ExpSumState<T> operator()(ExpSumState<T> a, ExpSumState<T> b) const {
    const T m = max_of(a.max, b.max);
    if (m == -static_cast<T>(INFINITY)) return {m, a.sum + b.sum};  // neither has an element
    return {m, unfused_product(a.sum, std::exp(a.max - m)) + unfused_product(b.sum, std::exp(b.max - m))};
  }
};

// ---- host replays of the device's combination order (arrays of per-lane / per-thread values) ----

// The value every lane of a warp holds after `v += __shfl_xor_sync(v, offset)` for offsets
// 16..1 (lane i adds lane i ^ offset's value to its own). `lane_values` (32 entries) is clobbered.
template <typename T, typename Combine>
TRIPOD_HD T warp_butterfly_in_device_order(T* lane_values, Combine combine) {
  for (int offset = kWarpLanes / 2; offset > 0; offset /= 2) {
    T next[kWarpLanes];
    for (int lane = 0; lane < kWarpLanes; ++lane) next[lane] = combine(lane_values[lane], lane_values[lane ^ offset]);
    for (int lane = 0; lane < kWarpLanes; ++lane) lane_values[lane] = next[lane];
  }
  return lane_values[0];
}

// A block's reduction of one value per thread (`threads` a multiple of 32): each warp's
// butterfly, then the warps' results combined in warp order starting from warp 0's.
template <typename T, typename Combine>
TRIPOD_HD T block_reduce_in_device_order(const T* thread_values, int threads, Combine combine) {
  T total{};
  for (int warp = 0; warp * kWarpLanes < threads; ++warp) {
    T lanes[kWarpLanes];
    for (int lane = 0; lane < kWarpLanes; ++lane) lanes[lane] = thread_values[warp * kWarpLanes + lane];
    const T warp_value = warp_butterfly_in_device_order(lanes, combine);
    total = warp == 0 ? warp_value : combine(total, warp_value);
  }
  return total;
}

struct SumOf {
  template <typename T>
  TRIPOD_HD T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOf {
  template <typename T>
  TRIPOD_HD T operator()(T a, T b) const {
    return max_of(a, b);
  }
};

}  // namespace tripod::kernels
