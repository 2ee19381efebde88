// Causal multi-head attention as cuBLASLt strided-batched GEMMs (backend/cuda/host/attention_gemms.h
// says which products, on which operands) around two softmax row kernels whose arithmetic is
// backend/kernels/attention_math.h. suites/unit/test_attention_gemms.cpp replays the whole
// sequence on the host (the GEMM calls through a column-major reference, the rows in this file's
// thread order, the head-major copies by the same index function) against the CPU backend. No
// atomics: every element has one writer, every sum a fixed order (cuBLASLt's, for a given
// algorithm, is fixed too), so a rerun is bit-identical.
//
// Why GEMMs: the products are 2*B*H*T*T*hd multiply-adds each (less the causal blocks skipped),
// which cuBLASLt runs from registers and shared memory; a kernel per query row instead reads the
// t + 1 key and value rows it needs from L2 for every query (GPT-2 124M at B8xT1024: ~26 GB a layer
// forward). qkv and dout are first copied head-major ([3][B*H][T][hd], 3*B*T*C elements), so that
// each product is one call over all B*H pairs per causal row block (attention_gemms.h), and the
// results are copied back: a few B*T*C-sized passes against the T x T buffers' traffic.
//
// Memory: probs[B,H,T,T] is kept for backward, as the Backend interface states (GPT-2 124M at
// B=8, T=1024: 8*12*1024*1024 fp32 = 384 MiB); backward needs a second buffer of that size for the
// score gradients, and both directions the head-major copies (7*B*T*C): the caller passes them in
// (the CUDA backend keeps them, counted by its allocator).
//
// Softmax rows, a block of kSoftmaxThreads per row (b, h, t) of the [B*H*T, T] buffer, in place:
//   forward   thread i owns columns j = i, i + threads, ... <= t: the block's max, exp(s - max)
//             and the block's sum (softmax_block_reduce.cuh's order), p = e / sum, 0 past t
//             (where the row-blocked score GEMMs wrote nothing, too).
//   backward  row_dot = the block's sum of p_j dp_j (j <= t), then ds_j = softmax_backward_score,
//             0 past t. Each thread rewrites only the columns it read, so in place is safe.
// The products read a row's columns only up to the end of its causal row block
// (attention_math.h's causal_block_end): the scratch rows they read (the score gradients, the
// rounded probabilities and score gradients) are written that far and no further, 3/8 of the
// squares' stores fewer at T = 1024; the kept fp32 probs are written whole.
//
// bf16 operands (fp32 tensors under the bf16-mixed policy; the caller passes a bf16 scratch):
// every product runs on bf16 tensor cores with fp32 accumulation and an fp32 result, its operands
// rounded where the CPU backend's attention rounds them (cpu/attention_kernels.cpp): q, k, v and
// dout in the head-major copies (converted as they are copied), the probabilities for the values
// and dvalue products and the score gradients for dquery and dkey (written rounded by the softmax
// row kernels: the probabilities beside the fp32 ones kept for backward, the score gradients
// instead of fp32 ones). The softmax, its sums and the kept probs stay fp32.
// bf16 scratch: qkvh [3][B*H][T][hd], douth [B*H][T][hd], then two [B*H][T][T] squares (the rounded
// probabilities and score gradients): 4*B*T*C + 2*B*H*T*T elements.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/host/attention_gemms.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/softmax_block_reduce.cuh"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/bf16_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

constexpr int kSoftmaxThreads = kernels::kAttentionSoftmaxThreads;
using kernels::kSoftmaxGroupWidth;
constexpr int kSoftmaxWarps = kSoftmaxThreads / kWarpSize;

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// A value as the bf16 operand copy holds it (round to nearest even: bf16_math.h, as the CPU rounds).
template <typename T>
__device__ __forceinline__ bf16 rounded_operand(T x) {
  bf16 out;
  out.bits = kernels::float_to_bf16_bits(static_cast<float>(x));  // T is float wherever a bf16 copy exists
  return out;
}

// probs16 (nullable): the rounded probabilities too, for the bf16 values product, as far as the
// products read them (causal_block_end: the rest of the scratch row is left as it is). The kept
// fp32 probs get the whole row, zeros past the diagonal, as the Backend interface states them.
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_forward_kernel(T* probs, bf16* probs16, int64_t rows, int64_t seq_len, int64_t row_blocks) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;  // keys 0..t
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    T* p = probs + row * seq_len;
    const T row_max =
        block_reduce(kernels::strided_max_partial(p, n, threadIdx.x, kSoftmaxThreads), scratch, kernels::MaxOf{});
    const T denom = block_reduce(kernels::exp_in_place_partial(p, n, row_max, threadIdx.x, kSoftmaxThreads), scratch,
                                 kernels::SumOf{});
    for (int64_t j = threadIdx.x; j < seq_len; j += kSoftmaxThreads) {
      p[j] = j < n ? p[j] / denom : T(0);
      if (probs16 != nullptr && j < read_end) probs16[row * seq_len + j] = rounded_operand(p[j]);
    }
  }
}

// dscores16, probs16 (both null or both set): the rounded score gradients (for dquery, dkey) and
// probabilities (for dvalue), written instead of the fp32 score gradients, which nothing reads then.
// Every output here is the products' scratch: written only as far as they read it (causal_block_end).
template <typename T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_backward_kernel(T* dscores, const T* probs, bf16* dscores16, bf16* probs16, int64_t rows,
                                   int64_t seq_len, int64_t row_blocks, T scale) {
  __shared__ T scratch[kSoftmaxWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    const T* p = probs + row * seq_len;
    T* ds = dscores + row * seq_len;  // holds dp on entry
    const T row_dot = block_reduce(kernels::strided_dot_partial(p, ds, n, threadIdx.x, kSoftmaxThreads), scratch,
                                   kernels::SumOf{});
    for (int64_t j = threadIdx.x; j < read_end; j += kSoftmaxThreads) {
      const T score = j < n ? kernels::softmax_backward_score(p[j], ds[j], row_dot, scale) : T(0);
      if (dscores16 == nullptr) {
        ds[j] = score;
      } else {  // only the rounded rows are read after this (by dquery, dkey, dvalue): no fp32 store
        dscores16[row * seq_len + j] = rounded_operand(score);
        probs16[row * seq_len + j] = rounded_operand(p[j]);
      }
    }
  }
}

// ---- fp32 rows in registers (attention_math.h's grouped ownership) ----
// The same values as the kernels above, each row read once with 16-byte loads and kept in
// registers: a thread's kGroups groups of 4 columns. Only the groups holding causal columns
// (4g < n) are loaded; the stores cover what the strided kernels store. Their sums run in the
// grouped order, which the host replay follows (test_attention_gemms.cpp).

// x's columns [4g, 4g + 4) rounded to bf16 where below `end` (one 8-byte store for a whole group).
__device__ __forceinline__ void store_bf16_group(bf16* row16, int64_t g, const float (&x)[4], int64_t end) {
  const int64_t j = kSoftmaxGroupWidth * g;
  if (j + kSoftmaxGroupWidth <= end) {
    reinterpret_cast<uint2*>(row16)[g] =
        make_uint2(kernels::float_pair_to_bf16_word(x[0], x[1]), kernels::float_pair_to_bf16_word(x[2], x[3]));
  } else {
    for (int e = 0; e < kSoftmaxGroupWidth; ++e)
      if (j + e < end) row16[j + e] = rounded_operand(x[e]);
  }
}

template <int kGroups>
__device__ __forceinline__ void load_causal_groups(float (&v)[4 * kGroups], const float* row, int64_t n) {
  TRIPOD_UNROLL
  for (int q = 0; q < kGroups; ++q) {
    const int64_t g = threadIdx.x + static_cast<int64_t>(q) * kSoftmaxThreads;
    const float4 x = kSoftmaxGroupWidth * g < n ? reinterpret_cast<const float4*>(row)[g] : make_float4(0, 0, 0, 0);
    v[4 * q] = x.x;
    v[4 * q + 1] = x.y;
    v[4 * q + 2] = x.z;
    v[4 * q + 3] = x.w;
  }
}

template <int kGroups>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_forward_grouped_kernel(float* probs, bf16* probs16, int64_t rows, int64_t seq_len,
                                          int64_t row_blocks) {
  constexpr int kSlots = kSoftmaxGroupWidth * kGroups;
  __shared__ float scratch[kSoftmaxWarps];
  const int64_t groups_in_row = seq_len / kSoftmaxGroupWidth;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    float* p = probs + row * seq_len;
    float v[kSlots];
    load_causal_groups<kGroups>(v, p, n);
    const float row_max = block_reduce(kernels::owned_max_partial<float, kSlots>(v, threadIdx.x, kSoftmaxThreads, n),
                                       scratch, kernels::MaxOf{});
    const float denom = block_reduce(
        kernels::owned_exp_in_place_partial<float, kSlots>(v, row_max, threadIdx.x, kSoftmaxThreads, n), scratch,
        kernels::SumOf{});
    TRIPOD_UNROLL
    for (int q = 0; q < kGroups; ++q) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(q) * kSoftmaxThreads;
      if (g >= groups_in_row) continue;
      float x[4];
      TRIPOD_UNROLL
      for (int e = 0; e < 4; ++e) x[e] = kSoftmaxGroupWidth * g + e < n ? v[4 * q + e] / denom : 0.0f;
      reinterpret_cast<float4*>(p)[g] = make_float4(x[0], x[1], x[2], x[3]);
      if (probs16 != nullptr && kSoftmaxGroupWidth * g < read_end)
        store_bf16_group(probs16 + row * seq_len, g, x, read_end);
    }
  }
}

template <int kGroups>
__global__ void __launch_bounds__(kSoftmaxThreads)
    causal_softmax_backward_grouped_kernel(float* dscores, const float* probs, bf16* dscores16, bf16* probs16,
                                           int64_t rows, int64_t seq_len, int64_t row_blocks, float scale) {
  constexpr int kSlots = kSoftmaxGroupWidth * kGroups;
  __shared__ float scratch[kSoftmaxWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t t = row % seq_len, n = t + 1;
    const int64_t read_end = kernels::causal_block_end(t, seq_len, row_blocks);
    float* ds = dscores + row * seq_len;  // holds dp on entry
    float p[kSlots], dp[kSlots];
    load_causal_groups<kGroups>(p, probs + row * seq_len, n);
    load_causal_groups<kGroups>(dp, ds, n);
    const float row_dot = block_reduce(
        kernels::owned_dot_partial<float, kSlots>(p, dp, threadIdx.x, kSoftmaxThreads, n), scratch, kernels::SumOf{});
    TRIPOD_UNROLL
    for (int q = 0; q < kGroups; ++q) {
      const int64_t g = threadIdx.x + static_cast<int64_t>(q) * kSoftmaxThreads;
      if (kSoftmaxGroupWidth * g >= read_end) continue;
      float score[4], prob[4];
      TRIPOD_UNROLL
      for (int e = 0; e < 4; ++e) {
        const bool inside = kSoftmaxGroupWidth * g + e < n;
        score[e] = inside ? kernels::softmax_backward_score(p[4 * q + e], dp[4 * q + e], row_dot, scale) : 0.0f;
        prob[e] = inside ? p[4 * q + e] : 0.0f;
      }
      if (dscores16 == nullptr) {
        const int64_t j = kSoftmaxGroupWidth * g;
        if (j + kSoftmaxGroupWidth <= read_end) {
          reinterpret_cast<float4*>(ds)[g] = make_float4(score[0], score[1], score[2], score[3]);
        } else {
          for (int e = 0; e < kSoftmaxGroupWidth; ++e)
            if (j + e < read_end) ds[j + e] = score[e];
        }
      } else {
        store_bf16_group(dscores16 + row * seq_len, g, score, read_end);
        store_bf16_group(probs16 + row * seq_len, g, prob, read_end);
      }
    }
  }
}

// Runs `launch(std::integral_constant<int, kGroups>)` for the row's groups a thread (1, 2, 4, 8);
// false where the grouped kernels do not apply (fp64, T % 4 != 0, T > 4096, unaligned buffers).
template <typename T, class Launch>
bool launch_grouped(int64_t seq_len, std::initializer_list<std::pair<const void*, std::size_t>> buffers,
                    const Launch& launch) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    for (const auto& [p, bytes] : buffers)
      if (p != nullptr && !aligned(p, bytes)) return false;
    switch (kernels::softmax_groups_per_thread(seq_len, kSoftmaxThreads)) {
      case 1: launch(std::integral_constant<int, 1>{}); return true;
      case 2: launch(std::integral_constant<int, 2>{}); return true;
      case 4: launch(std::integral_constant<int, 4>{}); return true;
      case 8: launch(std::integral_constant<int, 8>{}); return true;
      default: return false;
    }
  }
}

template <typename T>
constexpr DType dtype_of() {
  return sizeof(T) == sizeof(double) ? DType::F64 : DType::F32;
}

// In T's precision: fp32 products stay fp32 (never TF32), as the CPU backend's attention computes
// them; with bf16 operands, bf16 A and B, fp32 accumulation and C.
template <typename T>
void run_gemm(const RowMajorGemm& call, const CudaContext& ctx) {
  gemm(call, dtype_of<T>(), dtype_of<T>(), dtype_of<T>(), /*fp32_on_tf32=*/false, ctx);
}
void run_bf16_gemm(const RowMajorGemm& call, const CudaContext& ctx) {
  gemm(call, DType::BF16, DType::F32, DType::F32, /*fp32_on_tf32=*/false, ctx);
}
template <typename T>
constexpr AttentionBytes same_bytes() {
  return {sizeof(T), sizeof(T)};
}
constexpr AttentionBytes kBf16Operands{sizeof(bf16), sizeof(float)};

// A block a row, the grid capped by the device (the kernels loop over rows with a grid stride).
LaunchShape softmax_launch(int64_t rows, const CudaContext& ctx, const char* op) {
  const LaunchShape shape = rows_launch(rows, kSoftmaxThreads, 1, 0, ctx.limits);
  check_fits(shape, ctx.limits, op);
  return shape;
}

// Head-major copies (attention_math.h's token_major_index), either way: a warp per head_dim-long
// row of the head-major tensor, contiguous in both layouts, so the index arithmetic (five 64-bit
// divisions) runs once a row, not once an element (measured on an H200: per element, the copies
// moved 0.9 TB/s). One writer per element.
template <typename From, typename To>
struct HeadMajorRowCopy {
  To* dst;
  const From* src;
  int64_t batch, seq_len, n_head, head_dim, parts;
  bool to_head_major;
  __device__ void operator()(int64_t row, int lane) const {
    // Row r's first element: token_major_index(r * head_dim) = head_dim * token_major_index(r) of
    // rows one element long (a constant 1 the compiler folds: one division fewer).
    const int64_t head_major = row * head_dim;
    const int64_t token_major = head_dim * kernels::token_major_index(row, batch, seq_len, n_head, 1, parts);
    for (int64_t e = lane; e < head_dim; e += kWarpSize) {
      if (to_head_major) dst[head_major + e] = element(src[token_major + e]);
      else dst[token_major + e] = element(src[head_major + e]);
    }
  }
  __device__ __forceinline__ To element(From x) const {
    if constexpr (std::is_same_v<To, bf16>) return rounded_operand(x);
    else return x;
  }
};

// The same copies a warp per token row (b, t) of the token-major tensor, its parts * C columns
// in groups of four: 16-byte loads and stores on the fp32 side, 8-byte ones on the bf16 side, the
// head-major place of a group by attention_math.h's head_major_index (every row's stores are
// whole 64-element head rows, 16 lanes each). Needs hd % 4 == 0 and both tensors 16-byte aligned
// (measured on an H200, the head-row copies above moved 1.4 TB/s).
template <typename From, typename To>
struct TokenRowGroupCopy {
  To* dst;
  const From* src;
  int64_t batch, seq_len, n_head, head_dim, parts;
  bool to_head_major;
  __device__ void operator()(int64_t token_row, int lane) const {
    const int64_t groups = parts * n_head * head_dim / 4;
    for (int64_t g = lane; g < groups; g += kWarpSize) {
      const int64_t token_major = token_row * groups * 4 + 4 * g;
      const int64_t head_major = kernels::head_major_index(token_row, 4 * g, batch, seq_len, n_head, head_dim);
      if (to_head_major) store(dst + head_major, load(src + token_major));
      else store(dst + token_major, load(src + head_major));
    }
  }
  __device__ __forceinline__ static float4 load(const float* p) { return *reinterpret_cast<const float4*>(p); }
  __device__ __forceinline__ static void store(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
  __device__ __forceinline__ static void store(bf16* p, float4 v) {
    *reinterpret_cast<uint2*>(p) =
        make_uint2(kernels::float_pair_to_bf16_word(v.x, v.y), kernels::float_pair_to_bf16_word(v.z, v.w));
  }
};

template <typename From, typename To>
void copy_head_major(To* dst, const From* src, const AttentionDims& d, int64_t parts, bool to_head_major,
                     const CudaContext& ctx) {
  const char* name = to_head_major ? "attention (to head-major)" : "attention (to token-major)";
  if constexpr (std::is_same_v<From, float>) {
    if (d.head_dim() % 4 == 0 && aligned(dst, 16) && aligned(src, 16)) {
      launch_warp_rows(TokenRowGroupCopy<From, To>{dst, src, d.batch, d.seq_len, d.n_head, d.head_dim(), parts,
                                                   to_head_major},
                       d.batch * d.seq_len, ctx, name);
      return;
    }
  }
  launch_warp_rows(
      HeadMajorRowCopy<From, To>{dst, src, d.batch, d.seq_len, d.n_head, d.head_dim(), parts, to_head_major},
      parts * attention_head_major_elements(d) / d.head_dim(), ctx, name);
}
template <typename From, typename To>  // To: From's type, or bf16 (the operand copies)
void copy_to_head_major(To* dst, const From* src, const AttentionDims& d, int64_t parts, const CudaContext& ctx) {
  copy_head_major(dst, src, d, parts, true, ctx);
}
template <typename T>
void copy_to_token_major(T* dst, const T* src, const AttentionDims& d, int64_t parts, const CudaContext& ctx) {
  copy_head_major(dst, src, d, parts, false, ctx);
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, T* scratch, bf16* scratch16, int64_t batch, int64_t seq_len,
                       int64_t channels, int64_t n_head, const CudaContext& ctx) {
  const char* op = "attention_forward";
  const AttentionDims d = checked_attention_dims(op, batch, seq_len, channels, n_head);
  check(scratch16 == nullptr || std::is_same_v<T, float>, op, ": bf16 operands are for fp32 tensors");
  if (batch * seq_len * channels == 0) return;
  const int64_t part = attention_head_major_elements(d);
  const bool bf16_operands = scratch16 != nullptr;
  T* qkvh = scratch;             // [3][B*H][T][hd]
  T* outh = scratch + 3 * part;  // [B*H][T][hd]
  bf16* qkvh16 = bf16_operands ? scratch16 : nullptr;                      // [3][B*H][T][hd]
  bf16* probs16 = bf16_operands ? scratch16 + 4 * part : nullptr;          // [B*H][T][T]
  const double scale = kernels::attention_scale<T>(d.head_dim());
  if (bf16_operands) {
    copy_to_head_major(qkvh16, qkv, d, 3, ctx);
    for (int64_t r = 0; r < d.row_blocks; ++r)
      run_bf16_gemm(attention_scores_gemm(d, r, qkvh16, probs, kBf16Operands, scale), ctx);
  } else {
    copy_to_head_major(qkvh, qkv, d, 3, ctx);
    for (int64_t r = 0; r < d.row_blocks; ++r)
      run_gemm<T>(attention_scores_gemm(d, r, qkvh, probs, same_bytes<T>(), scale), ctx);
  }
  const int64_t rows = batch * n_head * seq_len;
  const LaunchShape shape = softmax_launch(rows, ctx, op);
  const bool grouped = launch_grouped<T>(seq_len, {{probs, 16}, {probs16, 8}}, [&](auto groups) {
    causal_softmax_forward_grouped_kernel<decltype(groups)::value><<<grid_of(shape), shape.block, 0, ctx.stream>>>(
        reinterpret_cast<float*>(probs), probs16, rows, seq_len, d.row_blocks);
  });
  if (!grouped)
    causal_softmax_forward_kernel<T>
        <<<grid_of(shape), shape.block, 0, ctx.stream>>>(probs, probs16, rows, seq_len, d.row_blocks);
  check_launch("attention_forward (softmax)");
  for (int64_t r = 0; r < d.row_blocks; ++r) {
    if (bf16_operands) run_bf16_gemm(attention_values_gemm(d, r, probs16, qkvh16, outh, kBf16Operands), ctx);
    else run_gemm<T>(attention_values_gemm(d, r, probs, qkvh, outh, same_bytes<T>()), ctx);
  }
  copy_to_token_major(out, outh, d, 1, ctx);
}

template <typename T>
void attention_backward(T* dqkv, T* score_grads, T* scratch, bf16* scratch16, const T* dout, const T* qkv,
                        const T* probs, int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                        const CudaContext& ctx) {
  const char* op = "attention_backward";
  const AttentionDims d = checked_attention_dims(op, batch, seq_len, channels, n_head);
  check(scratch16 == nullptr || std::is_same_v<T, float>, op, ": bf16 operands are for fp32 tensors");
  if (batch * seq_len * channels == 0) return;
  const int64_t part = attention_head_major_elements(d), square = attention_score_grad_elements(batch, seq_len, n_head);
  const bool bf16_operands = scratch16 != nullptr;
  T* qkvh = scratch;              // [3][B*H][T][hd]
  T* douth = scratch + 3 * part;  // [B*H][T][hd]
  T* dqkvh = scratch + 4 * part;  // [3][B*H][T][hd]
  bf16* qkvh16 = bf16_operands ? scratch16 : nullptr;                            // [3][B*H][T][hd]
  bf16* douth16 = bf16_operands ? scratch16 + 3 * part : nullptr;                // [B*H][T][hd]
  bf16* probs16 = bf16_operands ? scratch16 + 4 * part : nullptr;                // [B*H][T][T]
  bf16* score_grads16 = bf16_operands ? scratch16 + 4 * part + square : nullptr;  // [B*H][T][T]
  if (bf16_operands) {
    copy_to_head_major(qkvh16, qkv, d, 3, ctx);
    copy_to_head_major(douth16, dout, d, 1, ctx);
    for (int64_t r = 0; r < d.row_blocks; ++r)
      run_bf16_gemm(attention_dprobs_gemm(d, r, douth16, qkvh16, score_grads, kBf16Operands), ctx);
  } else {
    copy_to_head_major(qkvh, qkv, d, 3, ctx);
    copy_to_head_major(douth, dout, d, 1, ctx);
    for (int64_t r = 0; r < d.row_blocks; ++r)
      run_gemm<T>(attention_dprobs_gemm(d, r, douth, qkvh, score_grads, same_bytes<T>()), ctx);
  }
  const int64_t rows = batch * n_head * seq_len;
  const LaunchShape shape = softmax_launch(rows, ctx, op);
  const T scale = kernels::attention_scale<T>(d.head_dim());
  const bool grouped = launch_grouped<T>(
      seq_len, {{score_grads, 16}, {probs, 16}, {score_grads16, 8}, {probs16, 8}}, [&](auto groups) {
        causal_softmax_backward_grouped_kernel<decltype(groups)::value>
            <<<grid_of(shape), shape.block, 0, ctx.stream>>>(reinterpret_cast<float*>(score_grads),
                                                             reinterpret_cast<const float*>(probs), score_grads16,
                                                             probs16, rows, seq_len, d.row_blocks,
                                                             static_cast<float>(scale));
      });
  if (!grouped)
    causal_softmax_backward_kernel<T><<<grid_of(shape), shape.block, 0, ctx.stream>>>(
        score_grads, probs, score_grads16, probs16, rows, seq_len, d.row_blocks, scale);
  check_launch("attention_backward (softmax)");
  for (int64_t r = 0; r < d.row_blocks; ++r) {
    if (bf16_operands) {
      run_bf16_gemm(attention_dquery_gemm(d, r, score_grads16, qkvh16, dqkvh, kBf16Operands), ctx);
      run_bf16_gemm(attention_dkey_gemm(d, r, score_grads16, qkvh16, dqkvh, kBf16Operands), ctx);
      run_bf16_gemm(attention_dvalue_gemm(d, r, probs16, douth16, dqkvh, kBf16Operands), ctx);
    } else {
      run_gemm<T>(attention_dquery_gemm(d, r, score_grads, qkvh, dqkvh, same_bytes<T>()), ctx);
      run_gemm<T>(attention_dkey_gemm(d, r, score_grads, qkvh, dqkvh, same_bytes<T>()), ctx);
      run_gemm<T>(attention_dvalue_gemm(d, r, probs, douth, dqkvh, same_bytes<T>()), ctx);
    }
  }
  copy_to_token_major(dqkv, dqkvh, d, 3, ctx);
}

#define TRIPOD_INSTANTIATE(T)                                                                                   \
  template void attention_forward<T>(T*, T*, const T*, T*, bf16*, int64_t, int64_t, int64_t, int64_t,          \
                                     const CudaContext&);                                                       \
  template void attention_backward<T>(T*, T*, T*, bf16*, const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                      int64_t, const CudaContext&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
