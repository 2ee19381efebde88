// Softmax cross-entropy, fused with its backward, whole-vocabulary and over a vocabulary window,
// with the arithmetic of backend/kernels/cross_entropy_math.h and the row reductions of
// row_reduce_math.h (test_kernel_cross_entropy_math.cpp replays both on the host against the CPU).
//
// A block of kSoftmaxThreads threads per row of logits: thread t takes columns t, t + 256, ...
// (coalesced), the block reduces the row's max and then its sum of exp(x - max) in the fixed order
// of softmax_block_reduce.cuh, and the gradient overwrites the row in place (each thread writes
// only the columns it read). A row of GPT-2's 50257 logits is ~196 columns a thread; rows are
// independent, so the grid is one block a row (grid-stride beyond the grid limit).
//
// A target the device cannot index (>= the vocabulary) is not checked on the host here. In the
// whole-vocabulary kernels its loss and gradient row become NaN (cross_entropy_math.h), which the
// trainer's finite check names; the window kernels know no vocabulary size, so there it is just a
// target outside the window (a finite, wrong loss). The model checks every target on the host
// before uploading them (model/gpt.cpp), so neither reaches a kernel from the trainer.
#include <cmath>
#include <type_traits>

#include "backend/cuda/kernels/cross_entropy.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/softmax_block_reduce.cuh"
#include "backend/kernels/bf16_math.h"
#include "backend/kernels/cross_entropy_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

constexpr int kSoftmaxThreads = 256;
constexpr int kSoftmaxWarps = kSoftmaxThreads / kWarpSize;

template <typename T>
__device__ __forceinline__ T quiet_nan() {
  return static_cast<T>(NAN);
}

// The max of row[0, valid) and the sum of exp(row[j] - max) over it, every thread getting both.
template <typename T>
struct RowStats {
  T max, exp_sum;
};
template <typename T>
__device__ RowStats<T> row_stats(const T* row, int64_t valid, T* scratch) {
  const int tid = threadIdx.x;
  const T row_max = block_reduce(kernels::strided_max_partial(row, valid, tid, kSoftmaxThreads), scratch,
                                 kernels::MaxOf{});
  const T exp_sum = block_reduce(kernels::strided_exp_sum_partial(row, valid, row_max, tid, kSoftmaxThreads),
                                 scratch, kernels::SumOf{});
  return {row_max, exp_sum};
}

template <typename T>
__device__ void zero_row(T* row, int64_t cols) {
  for (int64_t j = threadIdx.x; j < cols; j += kSoftmaxThreads) row[j] = T(0);
}

// losses[r] = logsumexp(x_r) - x_r[target]; 0 for an ignored target.
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    cross_entropy_forward_kernel(T* losses, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t target = targets[r];  // the same for the whole block: the branches are uniform
    if (target < 0 || kernels::target_beyond_vocab(target, vocab)) {
      if (threadIdx.x == 0) losses[r] = target < 0 ? T(0) : quiet_nan<T>();
      continue;
    }
    const T* x = logits + r * vocab;
    const RowStats<T> s = row_stats(x, vocab, scratch);
    if (threadIdx.x == 0) losses[r] = kernels::cross_entropy_loss(kernels::logsumexp_from(s.max, s.exp_sum), x[target],
                                                                  target);
  }
}

// The row becomes (softmax(x) - onehot(target)) * grad_scale; an ignored row becomes 0.
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    cross_entropy_backward_kernel(T* logits, const int32_t* targets, int64_t rows, int64_t vocab, T grad_scale) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* x = logits + r * vocab;
    const int32_t target = targets[r];
    if (target < 0) {
      zero_row(x, vocab);
      continue;
    }
    const RowStats<T> s = row_stats(x, vocab, scratch);
    const T lse = kernels::target_beyond_vocab(target, vocab) ? quiet_nan<T>()
                                                               : kernels::logsumexp_from(s.max, s.exp_sum);
    for (int64_t j = threadIdx.x; j < vocab; j += kSoftmaxThreads)
      x[j] = kernels::cross_entropy_grad(x[j], lse, grad_scale, j == target);
  }
}

// row_max[r] = max of the window's valid columns (-inf for an empty window). L: the logits' type,
// T's or bf16 (bf16-mixed's logits, read into fp32 statistics) in these window kernels.
template <typename T, typename L = T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    logits_row_max_kernel(T* row_max, const L* logits, int64_t rows, int64_t cols, int64_t valid) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T m = block_reduce(kernels::strided_max_partial(logits + r * cols, valid, threadIdx.x, kSoftmaxThreads),
                             scratch, kernels::MaxOf{});
    if (threadIdx.x == 0) row_max[r] = m;
  }
}

// sums[r] = sum of exp(x - row_max[r]) over the valid columns; sums[rows + r] = the target's logit
// where this window holds it, else 0 (the vocab-parallel all-reduce adds the windows' parts).
template <typename T, typename L = T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    logits_exp_sums_kernel(T* sums, const L* logits, const T* row_max, const int32_t* targets, int64_t rows,
                           int64_t cols, int64_t start, int64_t valid) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const L* x = logits + r * cols;
    if (threadIdx.x == 0) sums[rows + r] = kernels::window_target_logit(x, targets[r], start, valid);
    const T sum = block_reduce(kernels::strided_exp_sum_partial(x, valid, row_max[r], threadIdx.x, kSoftmaxThreads),
                               scratch, kernels::SumOf{});
    if (threadIdx.x == 0) sums[r] = sum;
  }
}

// logits_row_max and logits_exp_sums in one read of the row: each thread's online (max, sum) pair
// over its columns, merged across the block in the reductions' fixed order (row_reduce_math.h).
template <typename T, typename L = T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    logits_stats_kernel(T* row_max, T* sums, const L* logits, const int32_t* targets, int64_t rows, int64_t cols,
                        int64_t start, int64_t valid) {
  __shared__ kernels::ExpSumState<T> scratch[kSoftmaxWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const L* x = logits + r * cols;
    if (threadIdx.x == 0) sums[rows + r] = kernels::window_target_logit(x, targets[r], start, valid);
    const kernels::ExpSumState<T> total =
        block_reduce(kernels::strided_online_exp_sum(x, valid, threadIdx.x, kSoftmaxThreads), scratch,
                     kernels::MergeExpSums{});
    if (threadIdx.x == 0) {
      row_max[r] = total.max;
      sums[r] = total.sum;
    }
  }
}

template <typename T>
struct FromSumsOp {
  T* __restrict__ losses;
  T* __restrict__ logsumexp;
  const T* __restrict__ row_max;
  const T* __restrict__ sums;
  const int32_t* __restrict__ targets;
  int64_t rows;
  __device__ void operator()(int64_t r) const {
    const T lse = kernels::logsumexp_from(row_max[r], sums[r]);
    logsumexp[r] = lse;
    losses[r] = kernels::cross_entropy_loss(lse, sums[rows + r], targets[r]);
  }
};

// A gradient element as stored: in T, or rounded to bf16 as convert rounds it (a GEMM operand).
template <typename O, typename T>
__device__ __forceinline__ O stored_as(T v) {
  if constexpr (std::is_same_v<O, bf16>) {
    O out;
    out.bits = kernels::float_to_bf16_bits(v);
    return out;
  } else {
    return v;
  }
}

// The window's columns of the gradient into `out` (the logits themselves, in place, or their bf16
// operand: each thread reads its elements before it writes them); padding columns [valid, cols)
// and ignored rows become 0. L: the logits' type (bf16 for bf16-mixed's, in place: the fp32
// arithmetic on their values, rounded once).
template <typename T, typename O, typename L = T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    cross_entropy_backward_window_kernel(O* out, const L* logits, const T* logsumexp, const int32_t* targets,
                                         int64_t rows, int64_t cols, int64_t start, int64_t valid, T grad_scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const L* x = logits + r * cols;
    O* o = out + r * cols;
    const int32_t target = targets[r];
    if (target < 0) {
      for (int64_t j = threadIdx.x; j < cols; j += kSoftmaxThreads) o[j] = stored_as<O>(T(0));
      continue;
    }
    const T lse = logsumexp[r];
    const int64_t target_column = kernels::window_target_column(target, start, valid);
    for (int64_t j = threadIdx.x; j < cols; j += kSoftmaxThreads)
      o[j] = stored_as<O>(j < valid ? kernels::cross_entropy_grad(kernels::widened(x[j]), lse, grad_scale,
                                                                  j == target_column)
                                    : T(0));
  }
}

// A training forward's loss and gradient in one kernel, over the whole vocabulary [0, valid) of
// rows of `cols` (padding past): the row's online max and sum as logits_stats_kernel takes them
// (the same reduction, so the same bits), its logsumexp and loss as FromSumsOp, then the gradient
// in place as cross_entropy_backward_window_kernel. Thread 0 reads the target's logit before the
// reduction's barriers, every write comes after them. The second read of the row should find it
// in L2, where the first left it, so each thread walks its columns back from its last: the row's
// end is what L2 took most recently. Not all of it stays there: ptxas gives this kernel 32
// registers, so 8 blocks an SM, ~1000 rows in flight on an H100 — 100 MB of GPT-2's 100 KB bf16
// rows against its 50 MB L2 (ncu's L2 hit rate in a lease would say how much the walk back
// saves). An ignored row: loss 0 and a zero gradient, as the separate kernels give.
template <typename T, typename L = T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    cross_entropy_with_gradient_kernel(T* losses, L* logits, const int32_t* targets, int64_t rows, int64_t cols,
                                       int64_t valid, T grad_scale) {
  __shared__ kernels::ExpSumState<T> scratch[kSoftmaxWarps];
  const int64_t tid = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    L* x = logits + r * cols;
    const int32_t target = targets[r];
    if (target < 0) {
      if (tid == 0) losses[r] = T(0);
      for (int64_t j = tid; j < cols; j += kSoftmaxThreads) x[j] = stored_as<L>(T(0));
      continue;
    }
    T target_logit = 0;
    if (tid == 0) target_logit = kernels::window_target_logit(x, target, 0, valid);
    const kernels::ExpSumState<T> total =
        block_reduce(kernels::strided_online_exp_sum(static_cast<const L*>(x), valid, threadIdx.x, kSoftmaxThreads),
                     scratch, kernels::MergeExpSums{});
    // A target beyond the vocabulary: a NaN loss and row, as the whole-vocabulary kernels above.
    const T lse = kernels::target_beyond_vocab(target, valid) ? quiet_nan<T>()
                                                              : kernels::logsumexp_from(total.max, total.sum);
    if (tid == 0) losses[r] = kernels::cross_entropy_loss(lse, target_logit, target);
    const int64_t target_column = kernels::window_target_column(target, 0, valid);
    for (int64_t j = kernels::last_strided_column(tid, cols, kSoftmaxThreads); j >= 0; j -= kSoftmaxThreads)
      x[j] = stored_as<L>(j < valid ? kernels::cross_entropy_grad(kernels::widened(x[j]), lse, grad_scale,
                                                                  j == target_column)
                                    : T(0));
  }
}

// `kernel` on one block of kSoftmaxThreads a row, on ctx.stream; nothing for no rows.
template <typename... KernelArgs, typename... Args>
void launch_row_blocks(void (*kernel)(KernelArgs...), int64_t rows, const CudaContext& ctx, const char* op,
                       Args... args) {
  if (rows == 0) return;
  const LaunchShape shape = rows_launch(rows, kSoftmaxThreads, 1, 0, ctx.limits);
  check_fits(shape, ctx.limits, op);
  kernel<<<grid_of(shape), shape.block, 0, ctx.stream>>>(args...);
  check_launch(op);
}

void check_rows(const char* op, int64_t rows, int64_t cols, int64_t valid) {
  check(rows >= 0 && cols >= 0 && valid >= 0 && valid <= cols, op, ": bad sizes (", rows, " rows of ", cols,
        " columns, ", valid, " valid)");
}

}  // namespace

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           const CudaContext& ctx) {
  const char* op = "cross_entropy_forward";
  check_rows(op, rows, vocab, vocab);
  launch_row_blocks(cross_entropy_forward_kernel<T>, rows, ctx, op, losses, logits, targets, rows, vocab);
}

template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, int64_t rows, int64_t vocab, double grad_scale,
                            const CudaContext& ctx) {
  const char* op = "cross_entropy_backward";
  check_rows(op, rows, vocab, vocab);
  if (vocab == 0) return;
  launch_row_blocks(cross_entropy_backward_kernel<T>, rows, ctx, op, logits, targets, rows, vocab,
                    static_cast<T>(grad_scale));
}

template <typename T>
void logits_row_max(T* row_max, const T* logits, int64_t rows, int64_t cols, int64_t valid, const CudaContext& ctx) {
  const char* op = "logits_row_max";
  check_rows(op, rows, cols, valid);
  launch_row_blocks(logits_row_max_kernel<T>, rows, ctx, op, row_max, logits, rows, cols, valid);
}

template <typename T>
void logits_exp_sums(T* sums, const T* logits, const T* row_max, const int32_t* targets, int64_t rows, int64_t cols,
                     int64_t start, int64_t valid, const CudaContext& ctx) {
  const char* op = "logits_exp_sums";
  check_rows(op, rows, cols, valid);
  launch_row_blocks(logits_exp_sums_kernel<T>, rows, ctx, op, sums, logits, row_max, targets, rows, cols, start,
                    valid);
}

template <typename T>
void logits_stats(T* row_max, T* sums, const T* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  int64_t start, int64_t valid, const CudaContext& ctx) {
  const char* op = "logits_stats";
  check_rows(op, rows, cols, valid);
  launch_row_blocks(logits_stats_kernel<T>, rows, ctx, op, row_max, sums, logits, targets, rows, cols, start, valid);
}

template <typename T>
void cross_entropy_from_sums(T* losses, T* logsumexp, const T* row_max, const T* sums, const int32_t* targets,
                             int64_t rows, const CudaContext& ctx) {
  check(rows >= 0, "cross_entropy_from_sums: negative row count ", rows);
  launch_elementwise(FromSumsOp<T>{losses, logsumexp, row_max, sums, targets, rows}, rows, ctx,
                     "cross_entropy_from_sums");
}

template <typename T>
void cross_entropy_backward_window(T* logits, const T* logsumexp, const int32_t* targets, int64_t rows, int64_t cols,
                                   int64_t start, int64_t valid, double grad_scale, const CudaContext& ctx) {
  const char* op = "cross_entropy_backward_window";
  check_rows(op, rows, cols, valid);
  if (cols == 0) return;
  launch_row_blocks(cross_entropy_backward_window_kernel<T, T>, rows, ctx, op, logits, static_cast<const T*>(logits),
                    logsumexp, targets, rows, cols, start, valid, static_cast<T>(grad_scale));
}

void cross_entropy_backward_window_to_bf16(bf16* out, const float* logits, const float* logsumexp,
                                           const int32_t* targets, int64_t rows, int64_t cols, int64_t start,
                                           int64_t valid, double grad_scale, const CudaContext& ctx) {
  const char* op = "cross_entropy_backward_window_to_bf16";
  check_rows(op, rows, cols, valid);
  if (cols == 0) return;
  launch_row_blocks(cross_entropy_backward_window_kernel<float, bf16>, rows, ctx, op, out, logits, logsumexp, targets,
                    rows, cols, start, valid, static_cast<float>(grad_scale));
}

void logits_row_max(float* row_max, const bf16* logits, int64_t rows, int64_t cols, int64_t valid,
                    const CudaContext& ctx) {
  const char* op = "logits_row_max (bf16 logits)";
  check_rows(op, rows, cols, valid);
  launch_row_blocks(logits_row_max_kernel<float, bf16>, rows, ctx, op, row_max, logits, rows, cols, valid);
}

void logits_exp_sums(float* sums, const bf16* logits, const float* row_max, const int32_t* targets, int64_t rows,
                     int64_t cols, int64_t start, int64_t valid, const CudaContext& ctx) {
  const char* op = "logits_exp_sums (bf16 logits)";
  check_rows(op, rows, cols, valid);
  launch_row_blocks(logits_exp_sums_kernel<float, bf16>, rows, ctx, op, sums, logits, row_max, targets, rows, cols,
                    start, valid);
}

void logits_stats(float* row_max, float* sums, const bf16* logits, const int32_t* targets, int64_t rows, int64_t cols,
                  int64_t start, int64_t valid, const CudaContext& ctx) {
  const char* op = "logits_stats (bf16 logits)";
  check_rows(op, rows, cols, valid);
  launch_row_blocks(logits_stats_kernel<float, bf16>, rows, ctx, op, row_max, sums, logits, targets, rows, cols,
                    start, valid);
}

void cross_entropy_backward_window(bf16* logits, const float* logsumexp, const int32_t* targets, int64_t rows,
                                   int64_t cols, int64_t start, int64_t valid, double grad_scale,
                                   const CudaContext& ctx) {
  const char* op = "cross_entropy_backward_window (bf16 logits)";
  check_rows(op, rows, cols, valid);
  if (cols == 0) return;
  launch_row_blocks(cross_entropy_backward_window_kernel<float, bf16, bf16>, rows, ctx, op, logits,
                    static_cast<const bf16*>(logits), logsumexp, targets, rows, cols, start, valid,
                    static_cast<float>(grad_scale));
}

template <typename T, typename L>
void cross_entropy_with_gradient(T* losses, L* logits, const int32_t* targets, int64_t rows, int64_t cols,
                                 int64_t vocab, double grad_scale, const CudaContext& ctx) {
  const char* op = std::is_same_v<L, bf16> ? "cross_entropy_with_gradient (bf16 logits)" : "cross_entropy_with_gradient";
  check_rows(op, rows, cols, vocab);  // no columns: still a loss (0, or NaN for a target) a row
  launch_row_blocks(cross_entropy_with_gradient_kernel<T, L>, rows, ctx, op, losses, logits, targets, rows, cols,
                    vocab, static_cast<T>(grad_scale));
}
template void cross_entropy_with_gradient<float, bf16>(float*, bf16*, const int32_t*, int64_t, int64_t, int64_t,
                                                       double, const CudaContext&);

#define TRIPOD_INSTANTIATE(T)                                                                                        \
  template void cross_entropy_with_gradient<T, T>(T*, T*, const int32_t*, int64_t, int64_t, int64_t, double,        \
                                                  const CudaContext&);                                              \
  template void cross_entropy_forward<T>(T*, const T*, const int32_t*, int64_t, int64_t, const CudaContext&);      \
  template void cross_entropy_backward<T>(T*, const int32_t*, int64_t, int64_t, double, const CudaContext&);       \
  template void logits_row_max<T>(T*, const T*, int64_t, int64_t, int64_t, const CudaContext&);                    \
  template void logits_exp_sums<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t,     \
                                   const CudaContext&);                                                             \
  template void logits_stats<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t,             \
                                const CudaContext&);                                                                \
  template void cross_entropy_from_sums<T>(T*, T*, const T*, const T*, const int32_t*, int64_t, const CudaContext&); \
  template void cross_entropy_backward_window<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t,  \
                                                 double, const CudaContext&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
