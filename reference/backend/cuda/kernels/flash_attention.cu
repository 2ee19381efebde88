// The flash attention kernels: backend/kernels/flash_attention_block.h's block algorithms run by a
// device executor whose tile products are bf16 tensor-core products (nvcuda::wmma, 16 x 16 x 16,
// fp32 accumulators) on operands in shared memory. One block of flash::kThreads (256) threads per
// (batch, head, 64-row tile). Shared memory at head size 64: 73 KiB forward (3 blocks an SM on an
// H200's 227 KiB), 96.5 KiB query gradients (2), 105.5 KiB key gradients (2); at 128 up to 153.5
// KiB. The backward's gradients add up in registers (each warp's wmma accumulators).
// Every launch raises the kernel's dynamic shared memory limit to what it takes.
//
// Deterministic: every output element is written by one block, which sums its tiles in a fixed
// order; no atomics.
#include <mma.h>

#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/host/attention_choice.h"
#include "backend/cuda/kernels/flash_attention.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/flash_attention_backward.h"
#include "backend/kernels/flash_attention_block.h"
#include "backend/kernels/flash_backward_warp.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

namespace flash = kernels::flash;

// Each thread runs its own share of a phase; sync() is the block barrier between phases.
// Host-callable so that the host pass of the block algorithms compiles; it never runs there.
struct DeviceBlock {
  __host__ __device__ static int thread() {
#ifdef __CUDA_ARCH__
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ int thread_begin() const { return thread(); }
  __host__ __device__ int thread_end() const { return thread() + 1; }
  __host__ __device__ int warp_begin() const { return thread() / kWarpSize; }
  __host__ __device__ int warp_end() const { return thread() / kWarpSize + 1; }
  __host__ __device__ int step() const { return 1; }
  __host__ __device__ void sync() const {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
  }
  // c [16][16] (ldc, row-major) = (accumulate ? c : 0) + op(a) [16, k] op(b) [k, 16], the whole
  // warp together. op(a) is a row-major (a[i*lda + kk]) or, transposed, column-major; op(b) alike.
  template <bool kATransposed, bool kBTransposed>
  __host__ __device__ __forceinline__ void product(float* c, int ldc, bool accumulate, const bf16* a, int lda, const bf16* b, int ldb,
                                   int k) const {
#ifdef __CUDA_ARCH__
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
    if (accumulate) nvcuda::wmma::load_matrix_sync(acc, c, static_cast<unsigned>(ldc), nvcuda::wmma::mem_row_major);
    else nvcuda::wmma::fill_fragment(acc, 0.0f);
    multiply_into<kATransposed, kBTransposed>(acc, a, lda, b, ldb, k);
    nvcuda::wmma::store_matrix_sync(c, acc, static_cast<unsigned>(ldc), nvcuda::wmma::mem_row_major);
#else
    (void)c, (void)ldc, (void)accumulate, (void)a, (void)lda, (void)b, (void)ldb, (void)k;
#endif
  }
  // The calling warp's N accumulator tiles, in registers (every index into `tile` is a constant
  // after the block algorithms' unrolled loops). `w`, the warp, is the calling one.
  template <int N>
  struct Accumulators {
#ifdef __CUDA_ARCH__
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> tile[N];
#endif
  };
  template <int N>
  __host__ __device__ __forceinline__ void zero_accumulators(Accumulators<N>& acc, int w) const {
    (void)w;
#ifdef __CUDA_ARCH__
    TRIPOD_UNROLL
    for (int m = 0; m < N; ++m) nvcuda::wmma::fill_fragment(acc.tile[m], 0.0f);
#else
    (void)acc;
#endif
  }
  template <bool kATransposed, bool kBTransposed, int N>
  __host__ __device__ __forceinline__ void accumulate(Accumulators<N>& acc, int w, int m, const bf16* a, int lda, const bf16* b,
                                      int ldb, int k) const {
    (void)w;
#ifdef __CUDA_ARCH__
    multiply_into<kATransposed, kBTransposed>(acc.tile[m], a, lda, b, ldb, k);
#else
    (void)acc, (void)m, (void)a, (void)lda, (void)b, (void)ldb, (void)k;
#endif
  }
  template <int N>
  __host__ __device__ __forceinline__ void store_accumulator(Accumulators<N>& acc, int w, int m, float* c, int ldc) const {
    (void)w;
#ifdef __CUDA_ARCH__
    nvcuda::wmma::store_matrix_sync(c, acc.tile[m], static_cast<unsigned>(ldc), nvcuda::wmma::mem_row_major);
#else
    (void)acc, (void)m, (void)c, (void)ldc;
#endif
  }

 private:
#ifdef __CUDA_ARCH__
  // acc += op(a) [16, k] op(b) [k, 16], 16 deep at a time.
  template <bool kATransposed, bool kBTransposed>
  __device__ __forceinline__ static void multiply_into(nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>& acc,
                                       const bf16* a, int lda, const bf16* b, int ldb, int k) {
    using namespace nvcuda;
    using LayoutA = std::conditional_t<kATransposed, wmma::col_major, wmma::row_major>;
    using LayoutB = std::conditional_t<kBTransposed, wmma::col_major, wmma::row_major>;
    for (int kk = 0; kk < k; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> fb;
      wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16*>(kATransposed ? a + kk * lda : a + kk),
                             static_cast<unsigned>(lda));
      wmma::load_matrix_sync(fb, reinterpret_cast<const __nv_bfloat16*>(kBTransposed ? b + kk : b + kk * ldb),
                             static_cast<unsigned>(ldb));
      wmma::mma_sync(acc, fa, fb, acc);
    }
  }
#endif
};

template <class Shared>
__device__ Shared& shared_of_block() {
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  return *reinterpret_cast<Shared*>(shared_bytes);
}

// The blocks an SM must hold at once, which caps each thread's registers at 64 Ki / (256 x blocks):
// what the kernel's shared memory allows on an H200 (227 KiB; host/attention_choice.h's sizes).
constexpr int blocks_per_sm(int head_dim, int at_most) { return head_dim == 128 ? at_most - 1 : at_most; }

template <int HD>
__global__ void __launch_bounds__(flash::kThreads, blocks_per_sm(HD, 3))
    flash_forward_kernel(flash::Problem p, const float* qkv, float* out, float* kept_out, float* lse) {
  const flash::BlockPlace at = flash::place_of_block(blockIdx.x, p, true);
  flash::forward_block<HD>(DeviceBlock{}, shared_of_block<flash::ForwardShared<HD>>(), p, qkv, out, kept_out, lse,
                           at.pair, at.tile);
}

template <int HD>
__global__ void __launch_bounds__(flash::kThreads, blocks_per_sm(HD, 2))
    flash_key_grads_kernel(flash::Problem p, const float* qkv, const float* dout, const float* lse,
                           const float* delta, float* dqkv) {
  const flash::BlockPlace at = flash::place_of_block(blockIdx.x, p, false);
  flash::key_grads_block<HD>(DeviceBlock{}, shared_of_block<flash::KeyGradsShared<HD>>(), p, qkv, dout, lse, delta,
                             dqkv, at.pair, at.tile);
}

template <int HD>
__global__ void __launch_bounds__(flash::kThreads, blocks_per_sm(HD, 2))
    flash_query_grads_kernel(flash::Problem p, const float* qkv, const float* dout, const float* lse,
                             const float* delta, float* dqkv) {
  const flash::BlockPlace at = flash::place_of_block(blockIdx.x, p, true);
  flash::query_grads_block<HD>(DeviceBlock{}, shared_of_block<flash::BackwardShared<HD>>(), p, qkv, dout, lse,
                               delta, dqkv, at.pair, at.tile);
}

// dout fp32, or the model's bf16 (flash-mma's register backward): the same bits (delta_of_row).
template <typename DOut>
struct DeltaOp {
  flash::Problem p;
  float* delta;
  const DOut* dout;
  const float* out;
  __device__ void operator()(int64_t row) const { delta[row] = flash::delta_of_row(p, dout, out, row); }
};

// One block a (pair, tile), its shared memory opted in; throws naming `op` past the device's limits.
template <class Shared, class... KernelArgs, class... Args>
void launch_tiles(void (*kernel)(KernelArgs...), const flash::Problem& p, const CudaContext& ctx, const char* op,
                  Args... args) {
  LaunchShape shape;
  shape.grid_x = p.pairs() * p.tiles();
  shape.block = flash::kThreads;
  shape.shared_bytes = sizeof(Shared);
  shape.shared_opted_in = true;  // the attribute is set just below, whatever the size
  check_fits(shape, ctx.limits, op);
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shape.shared_bytes)),
             op);
  kernel<<<grid_of(shape), shape.block, shape.shared_bytes, ctx.stream>>>(args...);
  check_launch(op);
}

flash::Problem problem_of(const char* op, int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                          const CudaContext& ctx, AttentionKernel kernel = AttentionKernel::Flash) {
  check(batch >= 0 && seq_len >= 0 && n_head > 0 && channels >= 0 && channels % n_head == 0, op, ": bad sizes (B ",
        batch, ", T ", seq_len, ", C ", channels, ", H ", n_head, ")");
  check(flash_attention_supported(seq_len, channels, n_head, ctx.limits.shared_per_block_optin, kernel), op,
        ": head size ", channels / n_head, " at T = ", seq_len,
        " is not supported (head size 16, 32, 64 or 128 whose kernels fit the device's shared memory, T > head size)");
  return {batch, seq_len, channels, n_head, kernels::attention_scale<float>(channels / n_head)};
}

// The block algorithms load qkv and dout four floats at a time (flash_attention_block.h's
// load_rows): their first element 16-byte aligned makes every row's (head sizes and C are
// multiples of 4). The model's activations are whole allocations; a view that is not is refused.
void check_rows_aligned(const char* op, std::initializer_list<const void*> tensors) {
  check(all_aligned_to(16, tensors), op, ": qkv and the output gradient must start 16-byte aligned "
        "(the flash kernels read them in 16-byte groups)");
}

}  // namespace

void flash_attention_forward(float* out, float* state, const float* qkv, int64_t batch, int64_t seq_len,
                             int64_t channels, int64_t n_head, const CudaContext& ctx) {
  const char* op = "flash_attention_forward";
  const flash::Problem p = problem_of(op, batch, seq_len, channels, n_head, ctx);
  if (batch * seq_len == 0) return;
  check_rows_aligned(op, {qkv});
  float* lse = state;
  float* kept_out = state + p.pairs() * seq_len;
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    launch_tiles<flash::ForwardShared<HD>>(flash_forward_kernel<HD>, p, ctx, op, p, qkv, out, kept_out, lse);
  });
}

void flash_attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv, const float* state,
                              int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                              const CudaContext& ctx, AttentionKernel kernel, bf16* register_copies,
                              const bf16* qkv16, const bf16* dout16, kernels::flash_mma::OperandOut operand) {
  const char* op = "flash_attention_backward";
  const flash::Problem p = problem_of(op, batch, seq_len, channels, n_head, ctx, kernel);
  const bool registers = flash_backward_in_registers(kernel, channels, n_head);
  check((qkv16 == nullptr && dout16 == nullptr) || registers, op, ": a bf16 ", qkv16 != nullptr ? "qkv" : "dout",
        " at head size ", p.head_dim(), ", which only flash-mma's register backward (head size up to 64) reads");
  check(!operand.given() || registers, op, ": dqkv as its bf16 operand at head size ", p.head_dim(),
        ", which only flash-mma's register backward (head size up to 64) writes");
  if (batch * seq_len == 0) return;
  check_rows_aligned(op, {qkv16 != nullptr ? static_cast<const void*>(qkv16) : qkv,
                          dout16 != nullptr ? static_cast<const void*>(dout16) : dout});
  const float* lse = state;
  const float* kept_out = state + p.pairs() * seq_len;
  if (dout16 != nullptr)
    launch_elementwise(DeltaOp<bf16>{p, delta, dout16, kept_out}, p.pairs() * seq_len, ctx,
                       "flash_attention_backward (delta)");
  else
    launch_elementwise(DeltaOp<float>{p, delta, dout, kept_out}, p.pairs() * seq_len, ctx,
                       "flash_attention_backward (delta)");
  if (registers) {
    flash_backward_mma_kernels(dqkv, delta, dout, qkv, lse, register_copies, batch, seq_len, channels, n_head, ctx,
                               qkv16, dout16, operand);
    return;
  }
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    launch_tiles<flash::KeyGradsShared<HD>>(flash_key_grads_kernel<HD>, p, ctx, op, p, qkv, dout, lse,
                                            static_cast<const float*>(delta), dqkv);
    launch_tiles<flash::BackwardShared<HD>>(flash_query_grads_kernel<HD>, p, ctx, op, p, qkv, dout, lse,
                                            static_cast<const float*>(delta), dqkv);
  });
}

}  // namespace tripod::cuda
