// LayerNorm forward and backward with the arithmetic of backend/kernels/layernorm_math.h
// (test_kernel_layernorm_math.cpp replays it on the host against the CPU backend).
//
// Forward: a warp per row [C] (launch_patterns.cuh). Lane l sums channels l, l + 32, ... (fp32
// rows of whole 16-byte groups: groups of four, 4l .. 4l + 3, then 4(l + 32) ...); the
// warp's xor butterfly (warp_reduce.cuh) gives every lane the row sum, then the same for the
// centred squares (two passes, as the CPU: no E[x^2] - mean^2 cancellation), then each lane writes
// its channels. The row is read three times; after the first read it comes from L1.
// Backward: the same warp per row for dinp (both row sums in one pass), and the column sums of
// column_sums.cuh for dweight and dbias (rows added in a fixed order, no atomics).
// Statistics are in T (fp32 for fp32, fp64 for fp64), as on the CPU.
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/kernels/column_sums.cuh"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/layernorm.h"
#include "backend/cuda/kernels/warp_reduce.cuh"
#include "backend/kernels/bf16_math.h"
#include "backend/kernels/layernorm_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

template <typename T, int kWidth>
__device__ __forceinline__ void store_group(T* p, const kernels::ChannelGroup<T, kWidth>& g) {
  if constexpr (kWidth == 4 && sizeof(T) == sizeof(float)) {
    *reinterpret_cast<float4*>(p) = make_float4(g.v[0], g.v[1], g.v[2], g.v[3]);
  } else {
    for (int e = 0; e < kWidth; ++e) p[e] = g.v[e];
  }
}

// A group of outputs rounded to bf16 as convert rounds them (a GEMM operand's copy): four in one
// 8-byte store where kWidth is 4.
template <int kWidth>
__device__ __forceinline__ void store_group(bf16* p, const kernels::ChannelGroup<float, kWidth>& g) {
  if constexpr (kWidth == 4) {
    store4(p, 0, make_float4(g.v[0], g.v[1], g.v[2], g.v[3]));
  } else {
    for (int e = 0; e < kWidth; ++e) p[e].bits = kernels::float_to_bf16_bits(g.v[e]);
  }
}

// kWidth: channels a lane takes at once (layernorm_math.h): 1, or 4 for fp32 rows of whole
// 16-byte groups (one 16-byte load or store a group instead of four 4-byte ones). O: the output's
// type, T or bf16 (Backend::layernorm_operand: the output only as its GEMM operand's copy).
template <typename T, int kWidth, typename O = T>
struct ForwardRow {
  O* __restrict__ out;
  T* __restrict__ mean;
  T* __restrict__ rstd;
  const T* __restrict__ inp;
  const T* __restrict__ weight;
  const T* __restrict__ bias;
  int64_t channels;
  double eps;
  __device__ void operator()(int64_t row, int lane) const {
    const T* x = inp + row * channels;
    const T m = kernels::layernorm_mean(
        warp_sum_all(kernels::layernorm_lane_sum<T, kWidth>(x, channels, lane, kWarpSize)), channels);
    const T s = kernels::layernorm_rstd(
        warp_sum_all(kernels::layernorm_lane_centered_squares<T, kWidth>(x, m, channels, lane, kWarpSize)), channels,
        eps);
    O* o = out + row * channels;
    for (int64_t c = kWidth * lane; c < channels; c += kWidth * kWarpSize) {
      const auto xs = kernels::load_group<T, kWidth>(x + c), w = kernels::load_group<T, kWidth>(weight + c),
                 b = kernels::load_group<T, kWidth>(bias + c);
      kernels::ChannelGroup<T, kWidth> y;
      for (int e = 0; e < kWidth; ++e) y.v[e] = kernels::layernorm_output(xs.v[e], m, s, w.v[e], b.v[e]);
      store_group(o + c, y);
    }
    if (lane == 0) {
      mean[row] = m;
      rstd[row] = s;
    }
  }
};

// dinp[row, :] += the row's input gradient.
template <typename T, int kWidth>
struct BackwardRow {
  T* __restrict__ dinp;
  const T* __restrict__ dout;
  const T* __restrict__ inp;
  const T* __restrict__ weight;
  const T* __restrict__ mean;
  const T* __restrict__ rstd;
  int64_t channels;
  __device__ void operator()(int64_t row, int lane) const {
    const T* x = inp + row * channels;
    const T* d = dout + row * channels;
    const T m = mean[row], s = rstd[row];
    kernels::LayernormRowSums<T> sums =
        kernels::layernorm_lane_backward_sums<T, kWidth>(d, x, weight, m, s, channels, lane, kWarpSize);
    sums.dnorm = warp_sum_all(sums.dnorm);
    sums.dnorm_norm = warp_sum_all(sums.dnorm_norm);
    const kernels::LayernormRowSums<T> means = kernels::layernorm_backward_means(sums, channels);
    T* dx = dinp + row * channels;
    for (int64_t c = kWidth * lane; c < channels; c += kWidth * kWarpSize) {
      const auto ds = kernels::load_group<T, kWidth>(d + c), xs = kernels::load_group<T, kWidth>(x + c),
                 w = kernels::load_group<T, kWidth>(weight + c);
      auto acc = kernels::load_group<T, kWidth>(dx + c);
      for (int e = 0; e < kWidth; ++e) acc.v[e] += kernels::layernorm_dinp(ds.v[e], xs.v[e], w.v[e], m, s, means);
      store_group(dx + c, acc);
    }
  }
};

// dbias[c] += sum_r dout[r, c]; dweight[c] += sum_r dout[r, c] * norm[r, c].
template <typename T>
struct WeightBiasColumns {
  using Value = T;
  static constexpr int kSums = 2;
  T* __restrict__ dweight;
  T* __restrict__ dbias;
  const T* __restrict__ dout;
  const T* __restrict__ inp;
  const T* __restrict__ mean;
  const T* __restrict__ rstd;
  int64_t channels;
  __device__ void add_row(int64_t row, int64_t c, T (&sums)[2]) const {
    const T d = dout[row * channels + c];
    sums[0] += d;
    sums[1] += kernels::layernorm_dweight_term(d, inp[row * channels + c], mean[row], rstd[row]);
  }
  __device__ void finish(int64_t c, const T (&totals)[2]) const {
    dbias[c] += totals[0];
    dweight[c] += totals[1];
  }
};

// The width every pointer allows: 4 where the math says so and all of them are 16-byte aligned.
template <typename T>
int group_width(int64_t channels, std::initializer_list<const void*> pointers) {
  return kernels::layernorm_group_width<T>(channels) == 4 && all_aligned_to(16, pointers) ? 4 : 1;
}

void check_shape(const char* op, int64_t rows, int64_t channels) {
  check(rows >= 0 && channels >= 0, op, ": bad shape [", rows, ", ", channels, "]");
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t rows,
                       int64_t channels, double eps, const CudaContext& ctx) {
  check_shape("layernorm_forward", rows, channels);
  check(channels > 0 || rows == 0, "layernorm_forward: ", rows, " rows of 0 channels have no mean");
  if (group_width<T>(channels, {out, inp, weight, bias}) == 4)
    launch_warp_rows(ForwardRow<T, 4>{out, mean, rstd, inp, weight, bias, channels, eps}, rows, ctx,
                     "layernorm_forward");
  else
    launch_warp_rows(ForwardRow<T, 1>{out, mean, rstd, inp, weight, bias, channels, eps}, rows, ctx,
                     "layernorm_forward");
}

void layernorm_forward_to_bf16(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                               const float* bias, int64_t rows, int64_t channels, double eps, const CudaContext& ctx) {
  check_shape("layernorm_forward_to_bf16", rows, channels);
  check(channels > 0 || rows == 0, "layernorm_forward_to_bf16: ", rows, " rows of 0 channels have no mean");
  // Four channels a lane where the fp32 rows are whole 16-byte groups and the bf16 rows 8-byte ones.
  if (group_width<float>(channels, {inp, weight, bias}) == 4 && aligned_to(out, 8))
    launch_warp_rows(ForwardRow<float, 4, bf16>{out, mean, rstd, inp, weight, bias, channels, eps}, rows, ctx,
                     "layernorm_forward_to_bf16");
  else
    launch_warp_rows(ForwardRow<float, 1, bf16>{out, mean, rstd, inp, weight, bias, channels, eps}, rows, ctx,
                     "layernorm_forward_to_bf16");
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t rows, int64_t channels, const CudaContext& ctx) {
  check_shape("layernorm_backward", rows, channels);
  if (channels == 0) return;
  if (group_width<T>(channels, {dinp, dout, inp, weight}) == 4)
    launch_warp_rows(BackwardRow<T, 4>{dinp, dout, inp, weight, mean, rstd, channels}, rows, ctx,
                     "layernorm_backward");
  else
    launch_warp_rows(BackwardRow<T, 1>{dinp, dout, inp, weight, mean, rstd, channels}, rows, ctx,
                     "layernorm_backward");
  launch_column_sums(WeightBiasColumns<T>{dweight, dbias, dout, inp, mean, rstd, channels}, rows, channels, ctx,
                     "layernorm_backward (weight and bias)");
}

#define TRIPOD_INSTANTIATE(T)                                                                                    \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double,       \
                                     const CudaContext&);                                                        \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,    \
                                      int64_t, const CudaContext&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
