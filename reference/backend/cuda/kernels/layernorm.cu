// LayerNorm forward and backward with the arithmetic of backend/kernels/layernorm_math.h
// (test_kernel_layernorm_math.cpp replays it on the host against the CPU backend).
//
// Forward: a warp per row [C] (launch_patterns.cuh). Lane l sums channels l, l + 32, ... (fp32
// rows of whole 16-byte groups: groups of four, 4l .. 4l + 3, then 4(l + 32) ...); the
// warp's xor butterfly (warp_reduce.cuh) gives every lane the row sum, then the same for the
// centred squares (two passes, as the CPU: no E[x^2] - mean^2 cancellation), then each lane writes
// its channels. The row is read three times; after the first read it comes from L1.
// Backward: the same warp per row for dinp (both row sums in one pass), and the column sums of
// column_sums.cuh for dweight and dbias (rows added in a fixed order, no atomics). Fused (the
// default; TRIPOD_CUDA_FUSIONS' layernorm-grads): the warps add their rows' dweight and dbias
// terms into shared-memory partials as they write dinp, a block a chunk of rows, and the chunks'
// partials are summed by column_sums.cuh: dout and x are read once instead of twice
// (layernorm_math.h has the partition and its order).
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
  __device__ void operator()(int64_t row, int lane) const { this->row<false>(row, lane, nullptr); }
  // kWithTerms: also add the row's terms of dbias and dweight into `terms` [2][C] (this warp's
  // partials, lane l owning the channels it owns here), reading dout and x once for both.
  template <bool kWithTerms>
  __device__ void row(int64_t row, int lane, T* terms) const {
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
      if constexpr (kWithTerms) {
        auto db = kernels::load_group<T, kWidth>(terms + c), dw = kernels::load_group<T, kWidth>(terms + channels + c);
        for (int e = 0; e < kWidth; ++e) {
          db.v[e] += ds.v[e];
          dw.v[e] += kernels::layernorm_dweight_term(ds.v[e], xs.v[e], m, s);
        }
        store_group(terms + c, db);
        store_group(terms + channels + c, dw);
      }
    }
  }
};

// The fused backward (layernorm_math.h's partition): a block of `warps` warps a chunk of rows,
// each warp's partials [2][C] in dynamic shared memory, the block's sum of them written to
// partials[chunk][2][C]. The grid loops over chunks.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kernels::kLayernormGradMaxWarps * kWarpSize)
    layernorm_backward_fused_kernel(BackwardRow<T, kWidth> op, int64_t rows, int64_t chunk_rows, T* partials) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int64_t C = op.channels;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize, lane = threadIdx.x % kWarpSize,
            warp = threadIdx.x / kWarpSize;
  T* const all_terms = reinterpret_cast<T*>(shared_bytes);  // [warps][2][C]
  T* const terms = all_terms + warp * 2 * C;
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    for (int64_t i = lane; i < 2 * C; i += kWarpSize) terms[i] = 0;
    __syncwarp();  // the lanes own other channels below than in the zeroing loop
    const int64_t first = chunk * chunk_rows, end = first + chunk_rows < rows ? first + chunk_rows : rows;
    for (int64_t r = first + warp; r < end; r += warps) op.template row<true>(r, lane, terms);
    __syncthreads();  // every warp's partials, before they are added across warps
    T* out = partials + chunk * 2 * C;
    for (int64_t i = threadIdx.x; i < 2 * C; i += blockDim.x) {
      T total = all_terms[i];
      for (int w = 1; w < warps; ++w) total += all_terms[w * 2 * C + i];
      out[i] = total;
    }
    __syncthreads();  // the next chunk zeroes what was just read
  }
}

// dbias[j] += sum over chunks of partials[chunk][0][j], dweight[j] alike from [chunk][1][j]: the
// partials as a [chunks, 2C] matrix whose column sums (column_sums.cuh) finish the gradients.
template <typename T>
struct ChunkPartialColumns {
  using Value = T;
  static constexpr int kSums = 1;
  T* __restrict__ dweight;
  T* __restrict__ dbias;
  const T* __restrict__ partials;
  int64_t channels;
  __device__ void add_row(int64_t chunk, int64_t j, T (&sums)[1]) const { sums[0] += partials[chunk * 2 * channels + j]; }
  __device__ void finish(int64_t j, const T (&totals)[1]) const {
    if (j < channels) dbias[j] += totals[0];
    else dweight[j - channels] += totals[0];
  }
};

// The fused backward on ctx.stream; false (nothing launched) where one warp's partials do not fit.
template <typename T, int kWidth>
bool launch_fused_backward(const BackwardRow<T, kWidth>& op, T* dweight, T* dbias, int64_t rows,
                           const CudaContext& ctx) {
  const char* name = "layernorm_backward (fused)";
  const int64_t C = op.channels;
  const int warps = kernels::layernorm_grad_warps(C, sizeof(T));
  if (warps == 0 || rows == 0) return false;
  const int64_t chunk_rows = kernels::layernorm_grad_chunk_rows(rows), chunks = (rows + chunk_rows - 1) / chunk_rows;
  const std::size_t shared_bytes = static_cast<std::size_t>(warps * 2 * C) * sizeof(T);
  const LaunchShape shape = rows_launch(chunks, warps * kWarpSize, 1, shared_bytes, ctx.limits);
  check_fits(shape, ctx.limits, name);
  StreamScratch partials(static_cast<std::size_t>(chunks * 2 * C) * sizeof(T), ctx.stream,
                         "cudaMallocAsync (layernorm gradient partials)");
  layernorm_backward_fused_kernel<T, kWidth>
      <<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(op, rows, chunk_rows, partials.as<T>());
  check_launch(name);
  launch_column_sums(ChunkPartialColumns<T>{dweight, dbias, partials.as<T>(), C}, chunks, 2 * C, ctx,
                     "layernorm_backward (fused: the chunks' sums)");
  return true;
}

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
                        const T* rstd, int64_t rows, int64_t channels, bool fused_sums, const CudaContext& ctx) {
  check_shape("layernorm_backward", rows, channels);
  if (channels == 0) return;
  if (group_width<T>(channels, {dinp, dout, inp, weight}) == 4) {
    const BackwardRow<T, 4> op{dinp, dout, inp, weight, mean, rstd, channels};
    if (fused_sums && launch_fused_backward(op, dweight, dbias, rows, ctx)) return;
    launch_warp_rows(op, rows, ctx, "layernorm_backward");
  } else {
    const BackwardRow<T, 1> op{dinp, dout, inp, weight, mean, rstd, channels};
    if (fused_sums && launch_fused_backward(op, dweight, dbias, rows, ctx)) return;
    launch_warp_rows(op, rows, ctx, "layernorm_backward");
  }
  launch_column_sums(WeightBiasColumns<T>{dweight, dbias, dout, inp, mean, rstd, channels}, rows, channels, ctx,
                     "layernorm_backward (weight and bias)");
}

#define TRIPOD_INSTANTIATE(T)                                                                                    \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double,       \
                                     const CudaContext&);                                                        \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,    \
                                      int64_t, bool, const CudaContext&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
