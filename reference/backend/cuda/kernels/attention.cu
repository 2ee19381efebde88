// Causal multi-head attention, forward and backward, as row kernels with the arithmetic of
// backend/kernels/attention_math.h (test_kernel_attention_math.cpp replays it on the host against
// the CPU backend). No atomics: every output element has one writer, and every sum runs in a fixed
// order, so a rerun is bit-identical.
//
// Memory: probs[B,H,T,T] is kept for backward, as the Backend interface states (GPT-2 124M at
// B=8, T=1024: 8*12*1024*1024 fp32 = 384 MiB); backward needs a second buffer of that size for the
// score gradients, which the caller passes in (the CUDA backend keeps one, counted by its allocator).
//
// Forward, a block of kAttentionThreads per query row (b, h, t): q_t goes to shared memory; each
// warp takes keys j = warp, warp + 4, ... <= t and computes q_t . k_j (lanes over the head
// dimension, coalesced, the warp's butterfly adds them); the block reduces the row's max and exp
// sum; the normalised row is written to probs (zeros past t); out_t = sum_j p_j v_j by threads
// (part, d) (attention_math.h). Cost: every row reads t + 1 key and value rows (from L2).
// Backward, two kernels:
//   rows     a block per (b, h, t): dp_j = dout_t . v_j (a warp per j), the row's sum p . dp, the
//            score gradients ds_j (kept in a [B,H,T,T] buffer), dq_t = sum_j ds_j k_j.
//   columns  a block per (b, h, j): dk_j = sum_{t>=j} ds[t, j] q_t and dv_j = sum_{t>=j} p[t, j]
//            dout_t, the column read once into shared memory.
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/softmax_block_reduce.cuh"
#include "backend/kernels/attention_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

constexpr int kAttentionThreads = 128;
constexpr int kAttentionWarps = kAttentionThreads / kWarpSize;
// Asking for 4 resident blocks lets ptxas use up to 128 registers a thread; left to itself it
// chose fewer for the fp64 backward on sm_90a and spilled to local memory.
constexpr int kAttentionBlocksPerSm = 4;

// The shapes every kernel shares, and where head h of batch b starts in each tensor.
struct AttentionShape {
  int64_t batch, seq_len, channels, n_head, head_dim;
  __host__ __device__ int64_t qkv_ld() const { return 3 * channels; }
  __device__ int64_t qkv_offset(int64_t b, int64_t h) const { return b * seq_len * 3 * channels + h * head_dim; }
  __device__ int64_t out_offset(int64_t b, int64_t h) const { return b * seq_len * channels + h * head_dim; }
};

// The shared memory of a block: a row (or column) of T values, an hd-vector, and scratch for the
// reductions and the weighted sums' parts.
template <typename T>
struct RowShared {
  T* row;
  T* vec;
  T* scratch;
  __device__ explicit RowShared(T* base, int64_t seq_len, int64_t head_dim)
      : row(base), vec(base + seq_len), scratch(base + seq_len + head_dim) {}
};

// dst[d] = sum_{begin <= i < end} w[i] * x[i * ld + d] for d < hd, in attention_math.h's order.
// Every thread of the block calls it; it ends with a barrier, so `w` and `partials` may be
// overwritten as soon as it returns.
template <typename T>
__device__ void weighted_rows(T* dst, const T* w, const T* x, int64_t ld, int64_t begin, int64_t end,
                              int64_t head_dim, T* partials) {
  const int parts = kernels::weighted_sum_parts(head_dim, kAttentionThreads);
  if (parts == 1) {
    for (int64_t d = threadIdx.x; d < head_dim; d += kAttentionThreads)
      dst[d] = kernels::weighted_rows_partial(w, x, ld, begin, end, d, 0, 1);
  } else {
    const int part = static_cast<int>(threadIdx.x / head_dim);
    const int64_t d = threadIdx.x % head_dim;
    if (part < parts)
      partials[part * head_dim + d] = kernels::weighted_rows_partial(w, x, ld, begin, end, d, part, parts);
    __syncthreads();
    if (threadIdx.x < head_dim) dst[threadIdx.x] = kernels::combine_parts(partials, head_dim, parts, threadIdx.x);
  }
  __syncthreads();  // every thread is done reading w and partials
}

// row[j] = scale * (vec . x_j) for j <= last, a warp per j.
template <typename T>
__device__ void dot_rows(T* row, const T* vec, const T* x, int64_t ld, int64_t last, int64_t head_dim, T scale) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t j = warp; j <= last; j += kAttentionWarps) {
    const T dot = warp_reduce(kernels::strided_dot_partial(vec, x + j * ld, head_dim, lane, kWarpSize),
                              kernels::SumOf{});
    if (lane == 0) row[j] = dot * scale;
  }
}

template <typename T>
__device__ void load_vector(T* dst, const T* src, int64_t n) {
  for (int64_t d = threadIdx.x; d < n; d += kAttentionThreads) dst[d] = src[d];
}

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads, kAttentionBlocksPerSm)
    attention_forward_kernel(T* out, T* probs, const T* qkv, AttentionShape s) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];  // read as T (double: 8-byte aligned)
  RowShared<T> sh(reinterpret_cast<T*>(shared_bytes), s.seq_len, s.head_dim);
  const T scale = kernels::attention_scale<T>(s.head_dim);
  const int64_t rows = s.batch * s.n_head * s.seq_len, ld = s.qkv_ld();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % s.seq_len, bh = row / s.seq_len, b = bh / s.n_head, h = bh % s.n_head;
    const T* q = qkv + s.qkv_offset(b, h);
    load_vector(sh.vec, q + t * ld, s.head_dim);
    __syncthreads();
    dot_rows(sh.row, sh.vec, q + s.channels, ld, t, s.head_dim, scale);  // scores against k_0..k_t
    __syncthreads();
    const int64_t n = t + 1;
    const T row_max =
        block_reduce(kernels::strided_max_partial(sh.row, n, threadIdx.x, kAttentionThreads), sh.scratch,
                     kernels::MaxOf{});
    const T denom = block_reduce(kernels::exp_in_place_partial(sh.row, n, row_max, threadIdx.x, kAttentionThreads),
                                 sh.scratch, kernels::SumOf{});
    T* p = probs + row * s.seq_len;
    for (int64_t j = threadIdx.x; j < s.seq_len; j += kAttentionThreads) {
      if (j < n) sh.row[j] /= denom;
      p[j] = j < n ? sh.row[j] : T(0);  // causal mask
    }
    __syncthreads();
    weighted_rows(out + s.out_offset(b, h) + t * s.channels, sh.row, q + 2 * s.channels, ld, 0, n, s.head_dim,
                  sh.scratch);
  }
}

// Per query row: the score gradients (to dscores) and dq_t.
template <typename T>
__global__ void __launch_bounds__(kAttentionThreads, kAttentionBlocksPerSm)
    attention_backward_rows_kernel(T* dqkv, T* dscores, const T* dout, const T* qkv, const T* probs,
                                   AttentionShape s) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];  // read as T (double: 8-byte aligned)
  RowShared<T> sh(reinterpret_cast<T*>(shared_bytes), s.seq_len, s.head_dim);
  const T scale = kernels::attention_scale<T>(s.head_dim);
  const int64_t rows = s.batch * s.n_head * s.seq_len, ld = s.qkv_ld();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % s.seq_len, bh = row / s.seq_len, b = bh / s.n_head, h = bh % s.n_head;
    const T* q = qkv + s.qkv_offset(b, h);
    load_vector(sh.vec, dout + s.out_offset(b, h) + t * s.channels, s.head_dim);
    __syncthreads();
    dot_rows(sh.row, sh.vec, q + 2 * s.channels, ld, t, s.head_dim, T(1));  // dp_j = dout_t . v_j
    __syncthreads();
    const int64_t n = t + 1;
    const T* p = probs + row * s.seq_len;
    const T row_dot = block_reduce(kernels::strided_dot_partial(p, sh.row, n, threadIdx.x, kAttentionThreads),
                                   sh.scratch, kernels::SumOf{});
    T* ds = dscores + row * s.seq_len;
    for (int64_t j = threadIdx.x; j < s.seq_len; j += kAttentionThreads) {
      if (j < n) sh.row[j] = kernels::softmax_backward_score(p[j], sh.row[j], row_dot, scale);
      ds[j] = j < n ? sh.row[j] : T(0);
    }
    __syncthreads();
    weighted_rows(dqkv + s.qkv_offset(b, h) + t * ld, sh.row, q + s.channels, ld, 0, n, s.head_dim, sh.scratch);
  }
}

// Per key row j: dk_j and dv_j from the columns j of dscores and probs (rows t >= j).
template <typename T>
__global__ void __launch_bounds__(kAttentionThreads, kAttentionBlocksPerSm)
    attention_backward_columns_kernel(T* dqkv, const T* dscores, const T* dout, const T* qkv, const T* probs,
                                      AttentionShape s) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];  // read as T (double: 8-byte aligned)
  RowShared<T> sh(reinterpret_cast<T*>(shared_bytes), s.seq_len, s.head_dim);
  const int64_t rows = s.batch * s.n_head * s.seq_len, ld = s.qkv_ld(), tt = s.seq_len;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t j = row % tt, bh = row / tt, b = bh / s.n_head, h = bh % s.n_head;
    const T* q = qkv + s.qkv_offset(b, h);
    T* dq = dqkv + s.qkv_offset(b, h);
    const T* ds = dscores + bh * tt * tt;
    const T* p = probs + bh * tt * tt;
    for (int64_t t = j + threadIdx.x; t < tt; t += kAttentionThreads) sh.row[t] = ds[t * tt + j];
    __syncthreads();
    weighted_rows(dq + s.channels + j * ld, sh.row, q, ld, j, tt, s.head_dim, sh.scratch);  // dk_j
    for (int64_t t = j + threadIdx.x; t < tt; t += kAttentionThreads) sh.row[t] = p[t * tt + j];
    __syncthreads();
    weighted_rows(dq + 2 * s.channels + j * ld, sh.row, dout + s.out_offset(b, h), s.channels, j, tt, s.head_dim,
                  sh.scratch);  // dv_j
  }
}

AttentionShape checked_shape(const char* op, int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head) {
  check(batch >= 0 && seq_len >= 0 && channels >= 0 && n_head > 0, op, ": bad sizes (batch ", batch, ", T ",
        seq_len, ", C ", channels, ", heads ", n_head, ")");
  check(channels % n_head == 0, op, ": ", channels, " channels do not split into ", n_head, " heads");
  return AttentionShape{batch, seq_len, channels, n_head, channels / n_head};
}

// One block a row of B*H*T, with the shared memory of attention_math.h (opted in past 48 KiB).
template <typename T, typename Kernel>
LaunchShape row_launch(Kernel kernel, const AttentionShape& s, const CudaContext& ctx, const char* op) {
  const std::size_t shared =
      static_cast<std::size_t>(kernels::attention_shared_elements(s.seq_len, s.head_dim, kAttentionThreads)) *
      sizeof(T);
  const LaunchShape shape = rows_launch(s.batch * s.n_head * s.seq_len, kAttentionThreads, 1, shared, ctx.limits);
  check_fits(shape, ctx.limits, op);
  if (shape.needs_shared_optin)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
               op);
  return shape;
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t batch, int64_t seq_len, int64_t channels,
                       int64_t n_head, const CudaContext& ctx) {
  const char* op = "attention_forward";
  const AttentionShape s = checked_shape(op, batch, seq_len, channels, n_head);
  if (batch * seq_len * channels == 0) return;
  const LaunchShape shape = row_launch<T>(attention_forward_kernel<T>, s, ctx, op);
  attention_forward_kernel<T><<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(out, probs, qkv, s);
  check_launch(op);
}

template <typename T>
void attention_backward(T* dqkv, T* score_grads, const T* dout, const T* qkv, const T* probs, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t n_head, const CudaContext& ctx) {
  const char* op = "attention_backward";
  const AttentionShape s = checked_shape(op, batch, seq_len, channels, n_head);
  if (batch * seq_len * channels == 0) return;
  const LaunchShape rows = row_launch<T>(attention_backward_rows_kernel<T>, s, ctx, op);
  const LaunchShape cols = row_launch<T>(attention_backward_columns_kernel<T>, s, ctx, op);
  attention_backward_rows_kernel<T><<<grid_of(rows), rows.block, rows.shared_bytes, ctx.stream>>>(
      dqkv, score_grads, dout, qkv, probs, s);
  check_launch("attention_backward (rows)");
  attention_backward_columns_kernel<T><<<grid_of(cols), cols.block, cols.shared_bytes, ctx.stream>>>(
      dqkv, score_grads, dout, qkv, probs, s);
  check_launch("attention_backward (columns)");
}

#define TRIPOD_INSTANTIATE(T)                                                                                    \
  template void attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t, const CudaContext&); \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,       \
                                      int64_t, const CudaContext&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
