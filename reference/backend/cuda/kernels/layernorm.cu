// LayerNorm forward and backward with the arithmetic of backend/kernels/layernorm_math.h
// (test_kernel_layernorm_math.cpp replays it on the host against the CPU backend).
//
// Forward: a warp per row [C] (launch_patterns.cuh). Lane l sums channels l, l + 32, ...; the
// warp's xor butterfly (warp_reduce.cuh) gives every lane the row sum, then the same for the
// centred squares (two passes, as the CPU: no E[x^2] - mean^2 cancellation), then each lane writes
// its channels. The row is read three times; after the first read it comes from L1.
// Backward: the same warp per row for dinp (both row sums in one pass), and the column sums of
// column_sums.cuh for dweight and dbias (rows added in a fixed order, no atomics).
// Statistics are in T (fp32 for fp32, fp64 for fp64), as on the CPU.
#include "backend/cuda/kernels/column_sums.cuh"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/layernorm.h"
#include "backend/cuda/kernels/warp_reduce.cuh"
#include "backend/kernels/layernorm_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

template <typename T>
struct ForwardRow {
  T* __restrict__ out;
  T* __restrict__ mean;
  T* __restrict__ rstd;
  const T* __restrict__ inp;
  const T* __restrict__ weight;
  const T* __restrict__ bias;
  int64_t channels;
  double eps;
  __device__ void operator()(int64_t row, int lane) const {
    const T* x = inp + row * channels;
    const T m = kernels::layernorm_mean(warp_sum_all(kernels::layernorm_lane_sum(x, channels, lane, kWarpSize)),
                                        channels);
    const T s = kernels::layernorm_rstd(
        warp_sum_all(kernels::layernorm_lane_centered_squares(x, m, channels, lane, kWarpSize)), channels, eps);
    T* o = out + row * channels;
    for (int64_t c = lane; c < channels; c += kWarpSize)
      o[c] = kernels::layernorm_output(x[c], m, s, weight[c], bias[c]);
    if (lane == 0) {
      mean[row] = m;
      rstd[row] = s;
    }
  }
};

// dinp[row, :] += the row's input gradient.
template <typename T>
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
    kernels::LayernormRowSums<T> sums = kernels::layernorm_lane_backward_sums(d, x, weight, m, s, channels, lane,
                                                                               kWarpSize);
    sums.dnorm = warp_sum_all(sums.dnorm);
    sums.dnorm_norm = warp_sum_all(sums.dnorm_norm);
    const kernels::LayernormRowSums<T> means = kernels::layernorm_backward_means(sums, channels);
    T* dx = dinp + row * channels;
    for (int64_t c = lane; c < channels; c += kWarpSize)
      dx[c] += kernels::layernorm_dinp(d[c], x[c], weight[c], m, s, means);
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

void check_shape(const char* op, int64_t rows, int64_t channels) {
  check(rows >= 0 && channels >= 0, op, ": bad shape [", rows, ", ", channels, "]");
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t rows,
                       int64_t channels, double eps, const CudaContext& ctx) {
  check_shape("layernorm_forward", rows, channels);
  check(channels > 0 || rows == 0, "layernorm_forward: ", rows, " rows of 0 channels have no mean");
  launch_warp_rows(ForwardRow<T>{out, mean, rstd, inp, weight, bias, channels, eps}, rows, ctx, "layernorm_forward");
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int64_t rows, int64_t channels, const CudaContext& ctx) {
  check_shape("layernorm_backward", rows, channels);
  if (channels == 0) return;
  launch_warp_rows(BackwardRow<T>{dinp, dout, inp, weight, mean, rstd, channels}, rows, ctx, "layernorm_backward");
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
