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

// Lanes own channels in groups of kWidth: lane l takes groups l, l + lanes, ..., channels
// kWidth * g .. kWidth * g + kWidth - 1, and sums them in ascending order. kWidth 1 is the
// strided ownership; fp32 rows of whole groups of 4 (layernorm_group_width) take 4, read on the
// device with one 16-byte load a group (the row must then be 16-byte aligned).
template <typename T>
TRIPOD_HD int layernorm_group_width(int64_t channels) {
  return sizeof(T) == sizeof(float) && channels % 4 == 0 ? 4 : 1;
}

template <typename T, int kWidth>
struct ChannelGroup {
  T v[kWidth];
};
template <typename T, int kWidth>
TRIPOD_HD ChannelGroup<T, kWidth> load_group(const T* p) {
  ChannelGroup<T, kWidth> g;
#if defined(__CUDA_ARCH__)
  if constexpr (kWidth == 4 && sizeof(T) == sizeof(float)) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    g.v[0] = f.x;
    g.v[1] = f.y;
    g.v[2] = f.z;
    g.v[3] = f.w;
  } else {
    for (int e = 0; e < kWidth; ++e) g.v[e] = p[e];
  }
#else
  for (int e = 0; e < kWidth; ++e) g.v[e] = p[e];
#endif
  return g;
}

// This lane's share of sum_c x[c] (channels a multiple of kWidth).
template <typename T, int kWidth = 1>
TRIPOD_HD T layernorm_lane_sum(const T* x, int64_t channels, int lane, int lanes) {
  T sum = 0;
  for (int64_t c = kWidth * lane; c < channels; c += kWidth * lanes) {
    const ChannelGroup<T, kWidth> g = load_group<T, kWidth>(x + c);
    for (int e = 0; e < kWidth; ++e) sum += g.v[e];
  }
  return sum;
}

// This lane's share of sum_c (x[c] - mean)^2 (two passes, as the CPU: no cancellation of E[x^2] - mean^2).
template <typename T, int kWidth = 1>
TRIPOD_HD T layernorm_lane_centered_squares(const T* x, T mean, int64_t channels, int lane, int lanes) {
  T sum = 0;
  for (int64_t c = kWidth * lane; c < channels; c += kWidth * lanes) {
    const ChannelGroup<T, kWidth> g = load_group<T, kWidth>(x + c);
    for (int e = 0; e < kWidth; ++e) sum += (g.v[e] - mean) * (g.v[e] - mean);
  }
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
template <typename T, int kWidth = 1>
TRIPOD_HD LayernormRowSums<T> layernorm_lane_backward_sums(const T* dout, const T* x, const T* weight, T mean,
                                                             T rstd, int64_t channels, int lane, int lanes) {
  LayernormRowSums<T> s;
  for (int64_t c = kWidth * lane; c < channels; c += kWidth * lanes) {
    const ChannelGroup<T, kWidth> d = load_group<T, kWidth>(dout + c), xs = load_group<T, kWidth>(x + c),
                                  w = load_group<T, kWidth>(weight + c);
    for (int e = 0; e < kWidth; ++e) {
      const T dnorm = d.v[e] * w.v[e];
      s.dnorm += dnorm;
      s.dnorm_norm += dnorm * (xs.v[e] - mean) * rstd;
    }
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

// ---- backward, fused (CUDA): dinp's rows and the column sums in one read of dout and x ----
// The rows split into chunks of layernorm_grad_chunk_rows(rows); a block of
// layernorm_grad_warps(C, sizeof(T)) warps takes a chunk, warp w its rows w, w + warps, ...,
// each adding its rows' terms into its own partials [2][C] (dbias's, then dweight's) in shared
// memory, ascending; the block adds its warps' partials in warp order into the chunk's row of a
// [chunks, 2C] matrix, whose column sums (column_sums.cuh, one chunk of rows) are added into
// dbias and dweight. Both partitions are functions of the sizes and the dtype only, so every
// device adds in the same order.
inline constexpr int64_t kLayernormGradChunkRows = 16;    // the least rows a chunk
inline constexpr int64_t kLayernormGradMaxChunks = 512;   // so the chunks' sums are one column-sums chunk
inline constexpr int kLayernormGradMaxWarps = 8;
inline constexpr int64_t kLayernormGradSharedBytes = 48 * 1024;  // no opt-in needed

TRIPOD_HD int64_t layernorm_grad_chunk_rows(int64_t rows) {
  const int64_t even = (rows + kLayernormGradMaxChunks - 1) / kLayernormGradMaxChunks;
  return even > kLayernormGradChunkRows ? even : kLayernormGradChunkRows;
}

// Warps a block: as many as their partials [warps][2][C] fit in kLayernormGradSharedBytes, at
// most kLayernormGradMaxWarps; 0 where one warp's do not (the two-pass form runs instead).
inline int layernorm_grad_warps(int64_t channels, int64_t element_bytes) {
  if (channels <= 0) return 0;
  const int64_t fit = kLayernormGradSharedBytes / (2 * channels * element_bytes);
  return static_cast<int>(fit < kLayernormGradMaxWarps ? fit : kLayernormGradMaxWarps);
}

}  // namespace tripod::kernels
