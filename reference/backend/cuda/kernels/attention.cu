// Causal multi-head attention as cuBLASLt strided-batched GEMMs (backend/cuda/host/attention_gemms.h
// says which products, on which operands) around two softmax row kernels whose arithmetic is
// backend/kernels/attention_math.h. suites/unit/test_attention_gemms.cpp replays the whole
// sequence on the host (the GEMM calls through a column-major reference, the rows in their kernels'
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
// The softmax rows (a block per row of the [B*H*T, T] buffer, in place) are attention_rows.cuh;
// the head-major copies attention_copies.cuh.
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
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/host/attention_gemms.h"
#include "backend/cuda/kernels/attention_copies.cuh"
#include "backend/cuda/kernels/attention_rows.cuh"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/reductions.h"
#include "backend/kernels/attention_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

using namespace attention_rows;    // the softmax row kernels
using namespace attention_copies;  // the head-major copies

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


}  // namespace

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, T* scratch, bf16* scratch16, int64_t batch, int64_t seq_len,
                       int64_t channels, int64_t n_head, const CudaContext& ctx, bf16* out16) {
  const char* op = "attention_forward";
  const AttentionDims d = checked_attention_dims(op, batch, seq_len, channels, n_head);
  check(scratch16 == nullptr || std::is_same_v<T, float>, op, ": bf16 operands are for fp32 tensors");
  check(out16 == nullptr || scratch16 != nullptr, op, ": a bf16 output is for the bf16-operand policy");
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
  const bool grouped = launch_grouped<T>(seq_len, {probs}, {probs16}, [&](auto groups) {
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
  if (out16 != nullptr) copy_head_major<T, bf16>(out16, outh, d, 1, /*to_head_major=*/false, ctx);
  else copy_to_token_major(out, outh, d, 1, ctx);
}

template <typename T>
void attention_backward(T* dqkv, T* score_grads, T* scratch, bf16* scratch16, const T* dout, const T* qkv,
                        const T* probs, int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                        const CudaContext& ctx, bf16* dqkv16, float* dbias) {
  const char* op = "attention_backward";
  const AttentionDims d = checked_attention_dims(op, batch, seq_len, channels, n_head);
  check(scratch16 == nullptr || std::is_same_v<T, float>, op, ": bf16 operands are for fp32 tensors");
  check(dqkv16 == nullptr || (scratch16 != nullptr && dbias != nullptr), op,
        ": a bf16 dqkv is written with bf16 operands and a bias gradient only");
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
      seq_len, {score_grads, probs}, {score_grads16, probs16}, [&](auto groups) {
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
  if constexpr (std::is_same_v<T, float>) {
    if (dqkv16 != nullptr) {  // token-major bf16 and c_attn's bias gradient, no fp32 dqkv
      head_major_bias_grad_and_bf16_copy(dbias, dqkv16, dqkvh, batch, seq_len, n_head, d.head_dim(), 3, ctx);
      return;
    }
  }
  copy_to_token_major(dqkv, dqkvh, d, 3, ctx);
}

#define TRIPOD_INSTANTIATE(T)                                                                                   \
  template void attention_forward<T>(T*, T*, const T*, T*, bf16*, int64_t, int64_t, int64_t, int64_t,          \
                                     const CudaContext&, bf16*);                                                \
  template void attention_backward<T>(T*, T*, T*, bf16*, const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                      int64_t, const CudaContext&, bf16*, float*);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
