// Flash attention with its tiles in registers (TRIPOD_CUDA_ATTENTION=flash-mma): the algorithms of
// backend/kernels/flash_forward_warp.h and flash_backward_warp.h run by a device warp executor
// whose product is PTX's mma.sync.aligned.m16n8k16 (bf16 A and B, fp32 C and D; sm_80 and later)
// and whose quad reductions are two butterfly shuffles. One block of flash_mma::kThreads (128)
// threads per (batch, head, 64-row tile), as flash_attention.cu's kernels; shared memory static
// (under 48 KiB): the forward's key and transposed value tiles (18 KiB at head size 64, 35 KiB at
// 128), the key-gradient kernel's Q and dO both ways (37 KiB at 64), the query-gradient kernel's
// K both ways and V (28 KiB at 64). The kernels read bf16 copies of qkv and dout that their
// launchers make first (flash_warp_tiles.h says why), in the caller's scratch of
// flash_mma_copy_elements. Written without a GPU (2026-12-06); the host replays them
// (suites/unit/test_flash_forward_warp.cpp, test_flash_backward_warp.cpp) and gpu-check's
// flash-mma step checks and times them.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/host/attention_choice.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/flash_attention.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/flash_backward_warp.h"
#include "backend/kernels/flash_forward_warp.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

namespace flash = kernels::flash;
namespace fm = kernels::flash_mma;

// One lane: each [kLanes][N] array of flash_forward_warp.h is this thread's registers. Host-callable
// so that the shared header's __host__ __device__ functions compile; it never runs on the host.
struct DeviceWarp {
  static constexpr int kLanes = 1;
  __host__ __device__ int lane(int) const {
#ifdef __CUDA_ARCH__
    return static_cast<int>(threadIdx.x) & 31;
#else
    return 0;
#endif
  }
  // D = A B + C for this lane's fragments: c[0][c0 .. c0+3], a[0][a0 .. a0+3], b[0][0 .. 1].
  template <int NC, int NA>
  __host__ __device__ __forceinline__ void mma(float (&c)[1][NC], int c0, const uint32_t (&a)[1][NA], int a0,
                                               const uint32_t (&b)[1][2]) const {
#ifdef __CUDA_ARCH__
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0][c0]), "+f"(c[0][c0 + 1]), "+f"(c[0][c0 + 2]), "+f"(c[0][c0 + 3])
        : "r"(a[0][a0]), "r"(a[0][a0 + 1]), "r"(a[0][a0 + 2]), "r"(a[0][a0 + 3]), "r"(b[0][0]), "r"(b[0][1]));
#else
    (void)c, (void)c0, (void)a, (void)a0, (void)b;
#endif
  }
  template <int N>
  __host__ __device__ __forceinline__ void quad_max(float (&x)[1][N], int k) const {
#ifdef __CUDA_ARCH__
    float v = x[0][k];
    for (int mask = 1; mask <= 2; mask *= 2) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, v, mask);
      v = other > v ? other : v;
    }
    x[0][k] = v;
#else
    (void)x, (void)k;
#endif
  }
  // The sum over the lane's group of four (lane ^ 1, ^ 2).
  template <int N>
  __host__ __device__ __forceinline__ void quad_sum(float (&x)[1][N], int k) const {
    xor_sum<1, 2>(x, k);
  }
  // The sum over the 8 lanes holding the same fragment columns (lane ^ 4, ^ 8, ^ 16).
  template <int N>
  __host__ __device__ __forceinline__ void column_sum(float (&x)[1][N], int k) const {
    xor_sum<4, 16>(x, k);
  }

 private:
  // x[0][k] = x + shfl_xor(x, m) for m = kFirst, 2 kFirst, ..., kLast in turn (flash_host_warp.h's order).
  template <int kFirst, int kLast, int N>
  __host__ __device__ __forceinline__ void xor_sum(float (&x)[1][N], int k) const {
#ifdef __CUDA_ARCH__
    float v = x[0][k];
    for (int mask = kFirst; mask <= kLast; mask *= 2) v = v + __shfl_xor_sync(0xFFFFFFFFu, v, mask);
    x[0][k] = v;
#else
    (void)x, (void)k;
#endif
  }
};

// Blocks an SM should hold at once below head size 128: 3, a cap of 168 registers a thread (the
// kernel takes 134 on sm_90a). It took 121 with the mask on every tile; peeling the diagonal tile
// off the loop (its masked form of forward_tile apart, the mask's arithmetic gone from every tile
// below the diagonal: 15 of 16 at GPT-2's T = 1024) spilled under the 128-register cap of 4
// blocks. FlashAttention-2 takes the same trade (masking steps apart, few blocks an SM); which is
// faster here is for a GPU to say (the form before is 3def8c0's).
constexpr int forward_blocks_per_sm(int hd) { return hd <= 64 ? 3 : 1; }

template <int HD>
__global__ void __launch_bounds__(fm::kThreads, forward_blocks_per_sm(HD))
    flash_forward_mma_kernel(flash::Problem p, const bf16* qkv, float* out, bf16* out16, float* kept_out, float* lse) {
  static_assert(sizeof(fm::Shared<HD>) <= 48 * 1024, "static shared memory is at most 48 KiB a block");
  __shared__ fm::Shared<HD> shared;
  const flash::BlockPlace at = flash::place_of_block(blockIdx.x, p, true);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t row0 = at.tile * flash::kTile + warp * fm::kRowsPerWarp;
  const DeviceWarp w;
  fm::WarpState<HD, 1> state;
  fm::start_rows<HD>(w, state, p, qkv, at.pair, row0);
  for (int64_t kt = 0; kt <= at.tile; ++kt) {
    __syncthreads();  // every warp is done with the tile before
    fm::load_key_tile<HD>(static_cast<int>(threadIdx.x), shared, p, qkv, at.pair, kt * flash::kTile,
                          p.rows_in_tile(kt));
    __syncthreads();
    if (kt == at.tile) break;  // the diagonal tile: masked, below
    fm::forward_tile<HD, false>(w, state, shared, p, row0, kt * flash::kTile);
  }
  fm::forward_tile<HD, true>(w, state, shared, p, row0, at.tile * flash::kTile);
  fm::finish_rows<HD>(w, state, p, out, out16, kept_out, lse, at.pair, row0);
}

// dK and dV of key tile at.tile: warp w its keys [16w, 16w + 16) over the query tiles that see them.
template <int HD>
__global__ void __launch_bounds__(fm::kThreads, 1)
    flash_key_grads_mma_kernel(flash::Problem p, const bf16* qkv, const bf16* dout, const float* lse,
                               const float* delta, float* dqkv, fm::OperandOut operand) {
  static_assert(sizeof(fm::KeyGradsShared<HD>) <= 48 * 1024, "static shared memory is at most 48 KiB a block");
  __shared__ fm::KeyGradsShared<HD> shared;
  const flash::BlockPlace at = flash::place_of_block(blockIdx.x, p, false);
  const int64_t key0 = at.tile * flash::kTile + static_cast<int>(threadIdx.x) / 32 * fm::kRowsPerWarp;
  const DeviceWarp w;
  fm::KeyWarp<HD, 1> warp;
  fm::key_warp_start<HD>(w, warp, p, qkv, at.pair, key0);
  for (int64_t qt = at.tile; qt < p.tiles(); ++qt) {
    __syncthreads();
    fm::load_query_tile<HD>(static_cast<int>(threadIdx.x), shared, p, qkv, dout, lse, delta, at.pair, qt);
    __syncthreads();
    fm::key_warp_tile<HD>(w, warp, shared, p, key0, qt * flash::kTile);
  }
  fm::store_gradient_rows<HD>(w, warp.dk, p, dqkv, operand, at.pair, key0, 1);
  fm::store_gradient_rows<HD>(w, warp.dv, p, dqkv, operand, at.pair, key0, 2);
}

// dQ of query tile at.tile: warp w its queries [16w, 16w + 16) over the key tiles they see.
template <int HD>
__global__ void __launch_bounds__(fm::kThreads, 1)
    flash_query_grads_mma_kernel(flash::Problem p, const bf16* qkv, const bf16* dout, const float* lse,
                                 const float* delta, float* dqkv, fm::OperandOut operand) {
  static_assert(sizeof(fm::QueryGradsShared<HD>) <= 48 * 1024, "static shared memory is at most 48 KiB a block");
  __shared__ fm::QueryGradsShared<HD> shared;
  const flash::BlockPlace at = flash::place_of_block(blockIdx.x, p, true);
  const int64_t row0 = at.tile * flash::kTile + static_cast<int>(threadIdx.x) / 32 * fm::kRowsPerWarp;
  const DeviceWarp w;
  fm::QueryWarp<HD, 1> warp;
  fm::query_warp_start<HD>(w, warp, p, qkv, dout, lse, delta, at.pair, row0);
  for (int64_t kt = 0; kt <= at.tile; ++kt) {
    __syncthreads();
    fm::load_key_tile<HD>(static_cast<int>(threadIdx.x), shared, p, qkv, at.pair, kt);
    __syncthreads();
    fm::query_warp_tile<HD>(w, warp, shared, p, row0, kt * flash::kTile);
  }
  fm::store_gradient_rows<HD>(w, warp.dq, p, dqkv, operand, at.pair, row0, 0);
}

// copies [0, n) = bf16(x), checked 16-byte aligned for the kernels' 16-byte tile loads (the rows
// and head offsets within are multiples of 8 elements).
void bf16_copy(bf16* copy, const float* x, int64_t n, const CudaContext& ctx, const char* op) {
  check(all_aligned_to(16, {copy}), op, ": the bf16 copy's scratch must start 16-byte aligned");
  convert<float, bf16>(x, copy, n, ctx);
}

// The model's own bf16 qkv or dout, read by the same 16-byte tile loads (a whole allocation is).
void check_given_aligned(const bf16* given, const char* op) {
  check(all_aligned_to(16, {given}), op, ": the bf16 qkv and output gradient must start 16-byte aligned");
}

}  // namespace

void flash_backward_mma_kernels(float* dqkv, const float* delta, const float* dout, const float* qkv,
                                const float* lse, bf16* copies, int64_t batch, int64_t seq_len, int64_t channels,
                                int64_t n_head, const CudaContext& ctx, const bf16* qkv16, const bf16* dout16,
                                kernels::flash_mma::OperandOut operand) {
  const char* op = "flash_attention_backward_mma";
  const flash::Problem p{batch, seq_len, channels, n_head, kernels::attention_scale<float>(channels / n_head)};
  check(fm::register_backward_head_dim(p.head_dim()), op, ": head size ", p.head_dim(), " has no register backward");
  check((dqkv == nullptr) == operand.given() && (operand.dqkv16 == nullptr) == (operand.partials == nullptr), op,
        ": dqkv is written in fp32, or as its bf16 operand with the bias gradient's partial sums");
  check(!operand.given() || all_aligned_to(4, {operand.dqkv16}), op, ": dqkv's bf16 operand must start 4-byte aligned");
  check(copies != nullptr || (qkv16 != nullptr && dout16 != nullptr), op, ": no scratch for the bf16 copies of ",
        qkv16 == nullptr ? "qkv" : "", qkv16 == nullptr && dout16 == nullptr ? " and " : "",
        dout16 == nullptr ? "dout" : "");
  bf16* next_copy = copies;  // qkv's copy first, then dout's: those not given
  if (qkv16 == nullptr) {
    bf16_copy(next_copy, qkv, batch * seq_len * 3 * channels, ctx, op);
    qkv16 = next_copy;
    next_copy += batch * seq_len * 3 * channels;
  } else {
    check_given_aligned(qkv16, op);
  }
  if (dout16 == nullptr) {
    bf16_copy(next_copy, dout, batch * seq_len * channels, ctx, op);
    dout16 = next_copy;
  } else {
    check_given_aligned(dout16, op);
  }
  LaunchShape shape;
  shape.grid_x = p.pairs() * p.tiles();
  shape.block = fm::kThreads;
  check_fits(shape, ctx.limits, op);
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    if constexpr (HD <= 64) {  // register_backward_head_dim
      // The two kernels write different thirds of dqkv (dk and dv; dq), one after the other.
      flash_key_grads_mma_kernel<HD>
          <<<grid_of(shape), shape.block, 0, ctx.stream>>>(p, qkv16, dout16, lse, delta, dqkv, operand);
      check_launch(op);
      flash_query_grads_mma_kernel<HD>
          <<<grid_of(shape), shape.block, 0, ctx.stream>>>(p, qkv16, dout16, lse, delta, dqkv, operand);
      check_launch(op);
    }
  });
}

void flash_attention_forward_mma(float* out, float* state, const float* qkv, bf16* copies, int64_t batch,
                                 int64_t seq_len, int64_t channels, int64_t n_head, const CudaContext& ctx,
                                 const bf16* qkv16, bf16* out16) {
  const char* op = "flash_attention_forward_mma";
  check(batch >= 0 && seq_len >= 0 && n_head > 0 && channels >= 0 && channels % n_head == 0, op, ": bad sizes (B ",
        batch, ", T ", seq_len, ", C ", channels, ", H ", n_head, ")");
  const std::size_t optin = ctx.limits.shared_per_block_optin;
  check(flash_attention_supported(seq_len, channels, n_head, optin, AttentionKernel::FlashMma), op, ": head size ",
        channels / n_head, " at T = ", seq_len, " is not supported (head size 16, 32, 64 or 128, T > head size)");
  if (batch * seq_len == 0) return;  // (an empty tensor's data may be no pointer at all)
  check((out == nullptr) != (out16 == nullptr), op, ": one of out (fp32) and its bf16 rounding is written");
  check(out16 == nullptr || all_aligned_to(4, {out16}), op, ": out's bf16 rounding must start 4-byte aligned");
  const flash::Problem p{batch, seq_len, channels, n_head, kernels::attention_scale<float>(channels / n_head)};
  if (qkv16 == nullptr) {
    check(copies != nullptr, op, ": no scratch for the bf16 copy of qkv");
    bf16_copy(copies, qkv, batch * seq_len * 3 * channels, ctx, op);
    qkv16 = copies;
  } else {
    check_given_aligned(qkv16, op);
  }
  float* lse = state;
  float* kept_out = state + p.pairs() * seq_len;
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    LaunchShape shape;
    shape.grid_x = p.pairs() * p.tiles();
    shape.block = fm::kThreads;
    shape.shared_bytes = 0;  // static: sizeof(fm::Shared<HD>) <= 35 KiB
    check_fits(shape, ctx.limits, op);
    flash_forward_mma_kernel<HD><<<grid_of(shape), shape.block, 0, ctx.stream>>>(p, qkv16, out, out16, kept_out, lse);
    check_launch(op);
  });
}

}  // namespace tripod::cuda
