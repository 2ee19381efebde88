// LayerNorm's per-row and per-column arithmetic (backend/cuda/kernels/layernorm.cu), written as
// cpu::layernorm_forward/backward write it, with the row sums split across `lanes` threads: lane l
// sums channels l, l + lanes, ... in order, and the lanes' partials are then combined (on the
// device by a warp butterfly, every lane getting the same total). The host test
// (test_kernel_layernorm_math.cpp) runs these with lanes = 32 and an emulated butterfly.
// Statistics are in T: fp32 for fp32, fp64 for fp64, as the CPU backend.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/host_device.h"

namespace tripod::kernels {

// ---- forward: x[C] -> out[C] = (x - mean) * rstd * weight + bias ----

// This lane's share of sum_c x[c].
template <typename T>
TRIPOD_HD T layernorm_lane_sum(const T* x, int64_t channels, int lane, int lanes) {
  T sum = 0;
  for (int64_t c = lane; c < channels; c += lanes) sum += x[c];
  return sum;
}

// This lane's share of sum_c (x[c] - mean)^2 (two passes, as the CPU: no cancellation of E[x^2] - mean^2).
template <typename T>
TRIPOD_HD T layernorm_lane_centered_squares(const T* x, T mean, int64_t channels, int lane, int lanes) {
  T sum = 0;
  for (int64_t c = lane; c < channels; c += lanes) sum += (x[c] - mean) * (x[c] - mean);
  return sum;
}

template <typename T>
TRIPOD_HD T layernorm_mean(T row_sum, int64_t channels) {
  return row_sum / static_cast<T>(channels);
}

// 1 / sqrt(variance + eps), the biased variance (divided by C), eps rounded to T as the CPU does.
template <typename T>
TRIPOD_HD T layernorm_rstd(T centered_square_sum, int64_t channels, double eps) {
  const T var = centered_square_sum / static_cast<T>(channels);
  return static_cast<T>(1) / std::sqrt(var + static_cast<T>(eps));
}

template <typename T>
TRIPOD_HD T layernorm_output(T x, T mean, T rstd, T weight, T bias) {
  return (x - mean) * rstd * weight + bias;
}

// ---- backward, per row: dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),
//      dnorm = dout * weight, norm = (x - mean) * rstd ----

template <typename T>
struct LayernormRowSums {
  T dnorm = 0;       // sum_c dnorm[c]
  T dnorm_norm = 0;  // sum_c dnorm[c] * norm[c]
};

// This lane's share of both row sums.
template <typename T>
TRIPOD_HD LayernormRowSums<T> layernorm_lane_backward_sums(const T* dout, const T* x, const T* weight, T mean,
                                                             T rstd, int64_t channels, int lane, int lanes) {
  LayernormRowSums<T> s;
  for (int64_t c = lane; c < channels; c += lanes) {
    const T dnorm = dout[c] * weight[c];
    s.dnorm += dnorm;
    s.dnorm_norm += dnorm * (x[c] - mean) * rstd;
  }
  return s;
}

// The row sums, combined over lanes, become means.
template <typename T>
TRIPOD_HD LayernormRowSums<T> layernorm_backward_means(LayernormRowSums<T> row, int64_t channels) {
  row.dnorm /= static_cast<T>(channels);
  row.dnorm_norm /= static_cast<T>(channels);
  return row;
}

// The gradient of one input element (to be added into dinp).
template <typename T>
TRIPOD_HD T layernorm_dinp(T dout, T x, T weight, T mean, T rstd, const LayernormRowSums<T>& means) {
  const T norm = (x - mean) * rstd;
  return (dout * weight - means.dnorm - norm * means.dnorm_norm) * rstd;
}

// ---- backward, per column: dbias[c] += sum_r dout[r, c], dweight[c] += sum_r dout[r, c] * norm[r, c] ----

template <typename T>
TRIPOD_HD T layernorm_dweight_term(T dout, T x, T mean, T rstd) {
  return dout * (x - mean) * rstd;
}

}  // namespace tripod::kernels
