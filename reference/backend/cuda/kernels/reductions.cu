// Deterministic reductions: scalar sums in fp64 over a fixed two-pass tree, and column sums over
// rows (column_sums.cuh). The order of every addition depends only on the sizes
// (backend/kernels/reduction_math.h), never on timing or on the device, and there are no atomics,
// so a rerun is bit-identical; test_kernel_reduction_math.cpp emulates the order on the host.
//
// Scratch for the partials: the first pass writes one fp64 partial per block (at most
// kMaxReduceBlocks = 1024, 8 KiB), taken with cudaMallocAsync on ctx.stream and given back with
// cudaFreeAsync right after the second pass. Stream-ordered allocation comes from the device's
// memory pool (no device synchronisation, no host round trip), stays correct with several streams
// or devices and inside CUDA graphs, and needs no per-device state to own and free, which a
// static scratch buffer would. When one block suffices (n <= 2048) the first pass writes the
// result itself and nothing is allocated (most bias and LayerNorm tensors).
#include <cstddef>

#include "backend/cuda/kernels/column_sums.cuh"
#include "backend/cuda/kernels/reductions.h"
#include "backend/cuda/kernels/stream_scratch.cuh"
#include "backend/cuda/kernels/warp_reduce.cuh"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/bf16_math.h"
#include "backend/kernels/elementwise_math.h"
#include "backend/kernels/row_reduce_math.h"
#include "backend/kernels/reduction_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

using kernels::kMaxReduceBlocks;
using kernels::kReduceThreads;

// ---- the terms summed (host-device so that kernels::strided_sum can call them anywhere) ----

template <typename T>
struct SquareTerm {
  const T* x;
  TRIPOD_HD double operator()(int64_t i) const { return kernels::square_term(x[i]); }
};

template <typename T>
struct NonfiniteTerm {
  const T* x;
  TRIPOD_HD double operator()(int64_t i) const { return kernels::nonfinite_term(x[i]); }
};
template <>
struct NonfiniteTerm<bf16> {
  const bf16* x;
  TRIPOD_HD double operator()(int64_t i) const { return kernels::nonfinite_bf16_term(x[i].bits); }
};

template <typename T>
struct ValidLossTerm {
  const T* losses;
  const int32_t* targets;
  TRIPOD_HD double operator()(int64_t i) const { return kernels::valid_loss_term(losses[i], targets[i]); }
};

// ---- the two passes ----

// Block b sums its threads' strided sums into out[b] (out[b] += when `accumulate`: with one block
// the first pass is the last, and writes the caller's scalar).
template <class Term>
__global__ void __launch_bounds__(kReduceThreads)
    partial_sums_kernel(Term term, int64_t n, double* out, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kReduceThreads;
  const double total = block_sum<kReduceThreads>(kernels::strided_sum(term, n, global_thread_index(), stride));
  if (threadIdx.x == 0) out[blockIdx.x] = accumulate ? out[blockIdx.x] + total : total;
}

// One block: thread t holds partial t (0 past `count`), summed in block_sum's fixed tree.
__global__ void __launch_bounds__(kMaxReduceBlocks)
    finish_sums_kernel(const double* partials, int64_t count, double* out, bool accumulate) {
  const double mine = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
  const double total = block_sum<kMaxReduceBlocks>(mine);
  if (threadIdx.x == 0) *out = accumulate ? *out + total : total;
}

// *out (+)= the sum of term(i) over [0, n), in the order of reduction_math.h.
template <class Term>
void reduce_to_scalar(const Term& term, int64_t n, double* out, bool accumulate, const CudaContext& ctx,
                      const char* op) {
  check(n >= 0, op, ": negative element count ", n);
  const int64_t blocks = kernels::reduce_blocks(n);
  const LaunchShape shape = rows_launch(blocks, kReduceThreads, 1, 0, ctx.limits);
  check(shape.grid_x == blocks, op, ": ", blocks, " reduction blocks exceed the grid limit");  // the order needs all
  check_fits(shape, ctx.limits, op);
  if (blocks == 1) {
    partial_sums_kernel<<<grid_of(shape), shape.block, 0, ctx.stream>>>(term, n, out, accumulate);
    check_launch(op);
    return;
  }
  StreamScratch partials(static_cast<std::size_t>(blocks) * sizeof(double), ctx.stream,
                         "cudaMallocAsync (reduction partials)");
  partial_sums_kernel<<<grid_of(shape), shape.block, 0, ctx.stream>>>(term, n, partials.as<double>(), false);
  check_launch(op);
  const LaunchShape finish = rows_launch(1, static_cast<int>(kMaxReduceBlocks), 1, 0, ctx.limits);
  check_fits(finish, ctx.limits, op);
  finish_sums_kernel<<<grid_of(finish), finish.block, 0, ctx.stream>>>(partials.as<double>(), blocks, out, accumulate);
  check_launch(op);
}

// dbias[c] += the column's rows, summed as column_sums.cuh describes.
template <typename T>
struct BiasGradColumns {
  using Value = T;
  static constexpr int kSums = 1;
  T* __restrict__ dbias;
  const T* __restrict__ dout;
  int64_t channels;
  __device__ void add_row(int64_t row, int64_t c, T (&sums)[1]) const { sums[0] += dout[row * channels + c]; }
  __device__ void finish(int64_t c, const T (&totals)[1]) const { dbias[c] += totals[0]; }
};

// BiasGradColumns' sums, each element also stored rounded to bf16 where it was read.
struct BiasGradBf16CopyColumns : BiasGradColumns<float> {
  bf16* __restrict__ copy;
  __device__ void add_row(int64_t row, int64_t c, float (&sums)[1]) const {
    const int64_t i = row * channels + c;
    const float x = dout[i];
    copy[i].bits = kernels::float_to_bf16_bits(x);
    sums[0] += x;
  }
};

// The same for d = gelu_backward(inp, dout) (dout the GELU output's gradient), computed where it is
// read and never stored: the bias gradient and bf16 copy of a GELU's input gradient in one pass.
// inp fp32, or bf16 (bf16-mixed's pre-activation); dout fp32, or bf16 with a bf16 inp (bf16-mixed's
// gradient of gelu(fc)): read as their exactly widened values.
template <typename In, typename DOut>
struct GeluBackwardBiasGradBf16CopyColumns {
  using Value = float;
  static constexpr int kSums = 1;
  float* __restrict__ dbias;
  bf16* __restrict__ copy;
  const In* __restrict__ inp;
  const DOut* __restrict__ dout;
  int64_t channels;
  __device__ void add_row(int64_t row, int64_t c, float (&sums)[1]) const {
    const int64_t i = row * channels + c;
    const float d = kernels::gelu_backward_value(kernels::widened(inp[i]), kernels::widened(dout[i]));
    copy[i].bits = kernels::float_to_bf16_bits(d);
    sums[0] += d;
  }
  __device__ void finish(int64_t c, const float (&totals)[1]) const { dbias[c] += totals[0]; }
};

// BiasGradBf16CopyColumns over a token-major matrix that is stored head-major: `dout` holds it in
// head-major order, element (row, c) at head_major_index(row, c) (as HeadMajorOffsets' two terms:
// the column's is loop-invariant in column_sums.cuh's loop down the rows); the copy token-major.
struct HeadMajorBiasGradBf16CopyColumns : BiasGradColumns<float> {
  bf16* __restrict__ copy;
  kernels::HeadMajorOffsets offsets;
  __device__ void add_row(int64_t row, int64_t c, float (&sums)[1]) const {
    const float x = dout[offsets.column_offset(c) + offsets.row_offset(row)];
    copy[row * channels + c].bits = kernels::float_to_bf16_bits(x);
    sums[0] += x;
  }
};

}  // namespace

template <typename T>
void sum_squares(double* acc, const T* x, int64_t n, const CudaContext& ctx) {
  if (n == 0) return;  // adds nothing
  reduce_to_scalar(SquareTerm<T>{x}, n, acc, true, ctx, "sum_squares");
}

template <typename T>
void count_nonfinite(double* acc, const T* x, int64_t n, const CudaContext& ctx) {
  if (n == 0) return;
  reduce_to_scalar(NonfiniteTerm<T>{x}, n, acc, true, ctx, "count_nonfinite");
}

template <typename T>
void sum_valid_losses(double* out, const T* losses, const int32_t* targets, int64_t n, const CudaContext& ctx) {
  if (n == 0) {  // the sum of nothing is 0, and *out is overwritten
    check_cuda(cudaMemsetAsync(out, 0, sizeof(double), ctx.stream), "sum_valid_losses (zero tokens)");
    return;
  }
  reduce_to_scalar(ValidLossTerm<T>{losses, targets}, n, out, false, ctx, "sum_valid_losses");
}

template <typename T>
void bias_grad(T* dbias, const T* dout, int64_t rows, int64_t channels, const CudaContext& ctx) {
  check(rows >= 0 && channels >= 0, "bias_grad: bad shape [", rows, ", ", channels, "]");
  launch_column_sums(BiasGradColumns<T>{dbias, dout, channels}, rows, channels, ctx, "bias_grad");
}

void bias_grad_and_bf16_copy(float* dbias, bf16* copy, const float* dout, int64_t rows, int64_t channels,
                             const CudaContext& ctx) {
  check(rows >= 0 && channels >= 0, "bias_grad_and_bf16_copy: bad shape [", rows, ", ", channels, "]");
  launch_column_sums(BiasGradBf16CopyColumns{{dbias, dout, channels}, copy}, rows, channels, ctx,
                     "bias_grad_and_bf16_copy");
}

template <typename In, typename DOut>
void gelu_backward_bias_grad_and_bf16_copy(float* dbias, bf16* copy, const In* inp, const DOut* dout, int64_t rows,
                                           int64_t channels, const CudaContext& ctx) {
  check(rows >= 0 && channels >= 0, "gelu_backward_bias_grad_and_bf16_copy: bad shape [", rows, ", ", channels, "]");
  launch_column_sums(GeluBackwardBiasGradBf16CopyColumns<In, DOut>{dbias, copy, inp, dout, channels}, rows, channels,
                     ctx, "gelu_backward_bias_grad_and_bf16_copy");
}

void head_major_bias_grad_and_bf16_copy(float* dbias, bf16* copy, const float* head_major, int64_t batch,
                                        int64_t seq_len, int64_t n_head, int64_t head_dim, int64_t parts,
                                        const CudaContext& ctx) {
  check(batch >= 0 && seq_len >= 0 && n_head >= 0 && head_dim >= 0 && parts >= 1 &&
            batch * seq_len < (int64_t{1} << 31),
        "head_major_bias_grad_and_bf16_copy: bad shape [", parts, "][", batch, "][", n_head, "][", seq_len, "][",
        head_dim, "] (token rows below 2^31)");
  const int64_t channels = parts * n_head * head_dim;
  launch_column_sums(HeadMajorBiasGradBf16CopyColumns{{dbias, head_major, channels}, copy,
                                                      {batch, seq_len, n_head, head_dim}},
                     batch * seq_len, channels, ctx, "head_major_bias_grad_and_bf16_copy");
}

template void gelu_backward_bias_grad_and_bf16_copy<float, float>(float*, bf16*, const float*, const float*, int64_t,
                                                                 int64_t, const CudaContext&);
template void gelu_backward_bias_grad_and_bf16_copy<bf16, float>(float*, bf16*, const bf16*, const float*, int64_t,
                                                                int64_t, const CudaContext&);
template void gelu_backward_bias_grad_and_bf16_copy<bf16, bf16>(float*, bf16*, const bf16*, const bf16*, int64_t,
                                                               int64_t, const CudaContext&);
template void sum_squares<float>(double*, const float*, int64_t, const CudaContext&);
template void sum_squares<double>(double*, const double*, int64_t, const CudaContext&);
template void count_nonfinite<float>(double*, const float*, int64_t, const CudaContext&);
template void count_nonfinite<double>(double*, const double*, int64_t, const CudaContext&);
template void count_nonfinite<bf16>(double*, const bf16*, int64_t, const CudaContext&);
template void sum_valid_losses<float>(double*, const float*, const int32_t*, int64_t, const CudaContext&);
template void sum_valid_losses<double>(double*, const double*, const int32_t*, int64_t, const CudaContext&);
template void bias_grad<float>(float*, const float*, int64_t, int64_t, const CudaContext&);
template void bias_grad<double>(double*, const double*, int64_t, int64_t, const CudaContext&);

}  // namespace tripod::cuda
