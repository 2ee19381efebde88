// CPU kernels, templated on the element type (float or double; bf16 where stated). Every reduction
// runs in an order that does not depend on the number of OpenMP threads, so a run is
// bit-reproducible and its results do not change when the thread count does.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"

namespace tripod::cpu {

// C = alpha * op(A) @ op(B) + beta * C through OpenBLAS (cblas_sgemm / cblas_dgemm).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
// bf16 A and B, fp32 accumulation (sgemm on the exactly widened inputs); C fp32, or bf16 read and
// rounded once at the end (TC = float or bf16).
template <typename TC>
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t lda,
               const bf16* b, int64_t ldb, float beta, TC* c, int64_t ldc);

// fp32 C = alpha * op(A) @ op(B) + beta * C with A and B rounded to bf16 or TF32 first (the
// Fp32Matmul policies of backend.h other than Exact): the rounded products are exact in fp32.
void gemm_rounded_operands(Fp32Matmul mode, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// fp32 <-> fp64 <-> bf16, round to nearest even (core/bf16.h).
template <typename From, typename To>
void convert(const From* src, To* dst, int64_t n);
// convert<float, bf16>'s rounding on one thread (for a caller already inside a parallel loop).
void round_to_bf16(const float* src, bf16* dst, int64_t n);
template <typename T>
int64_t count_nonfinite(const T* x, int64_t n);
// Sum of losses[i] over targets[i] >= 0, in fp64 and index order.
template <typename T>
double sum_valid_losses(const T* losses, const int32_t* targets, int64_t n);

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t n_tokens,
                       int64_t seq_len, int64_t channels, int64_t vocab);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                        int64_t seq_len, int64_t channels);

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t rows, int64_t channels, double eps);
// layernorm_forward with its output rounded to bf16 (the bits of layernorm_forward then convert).
void layernorm_forward_to_bf16(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                               const float* bias, int64_t rows, int64_t channels, double eps);
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t rows, int64_t channels);

template <typename T>
void bias_add(T* out, const T* bias, int64_t rows, int64_t channels);
template <typename T>
void bias_grad(T* dbias, const T* dout, int64_t rows, int64_t channels);

// In, DOut: T, or bf16 for an fp32 T (bf16-mixed's pre-activation fc and gradient of gelu(fc)),
// read as their exactly widened values.
template <typename T, typename In = T>
void gelu_forward(T* out, const In* inp, int64_t n);
template <typename T, typename In = T, typename DOut = T>
void gelu_backward(T* dinp, const In* inp, const DOut* dout, int64_t n);
// bf16(gelu(inp)) for an fp32 or bf16 inp: the bits of gelu_forward then convert, without an fp32 output.
template <typename In>
void gelu_forward_to_bf16(bf16* out, const In* inp, int64_t n);

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t batch, int64_t seq_len, int64_t channels,
                       int64_t n_head, bool bf16_operands = false);
// bf16_operands (fp32 only; the bf16-mixed policy): every product's operands rounded to bf16 first
// (attention_kernels.cpp says where).
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t n_head, bool bf16_operands = false);

// The emulated device's flash attention (flash_attention_host.cpp): fp32 tensors, bf16 operands;
// `state` keeps the rows' logsumexp [B*H*T] and a copy of out [B*T*C]. Overwrites dqkv.
void flash_attention_forward(float* out, float* state, const float* qkv, int64_t batch, int64_t seq_len,
                             int64_t channels, int64_t n_head);
// The same state and outputs through flash_forward_warp.h's register-resident forward
// (TRIPOD_CUDA_ATTENTION=flash-mma), its warps run by the host warp executor on a bf16 copy of qkv
// made first, as the CUDA launcher does (and the backward's on copies of qkv and dout).
void flash_attention_forward_mma(float* out, float* state, const float* qkv, int64_t batch, int64_t seq_len,
                                 int64_t channels, int64_t n_head, bf16* out16 = nullptr);
// The same from qkv's bf16 rounding itself (Backend::attention_input_dtype's bf16 qkv): no copy.
// `out16`: out's bf16 rounding [B, T, C], written in out's place where out is null (the GEMM operand).
void flash_attention_forward_mma(float* out, float* state, const bf16* qkv16, int64_t batch, int64_t seq_len,
                                 int64_t channels, int64_t n_head, bf16* out16 = nullptr);
void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* state, int64_t batch,
                              int64_t seq_len, int64_t channels, int64_t n_head);
// The same gradients through flash_backward_warp.h's register kernels at head sizes up to 64 (the
// block algorithms' above), their warps run by the host warp executor.
// `dqkv16` and `partials` (both, or neither; register kernels only): dqkv written as c_attn's bf16
// operand [B, T, 3C] with the bias gradient's partial sums [flash_mma::column_sum_rows, 3C]
// (flash_backward_warp.h's store_operand_rows), dqkv null.
void flash_attention_backward_mma(float* dqkv, const float* dout, const float* qkv, const float* state, int64_t batch,
                                  int64_t seq_len, int64_t channels, int64_t n_head, bf16* dqkv16 = nullptr,
                                  float* partials = nullptr);
// The same from a bf16 qkv, at the head sizes the register kernels take only (throws above 64);
// and from a bf16 dout too (the model's where attention_input_dtype says bf16: the kernels' copy of
// an fp32 dout is its rounding, and delta rounds it so, so the bits are those of the fp32 dout).
void flash_attention_backward_mma(float* dqkv, const float* dout, const bf16* qkv16, const float* state,
                                  int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                                  bf16* dqkv16 = nullptr, float* partials = nullptr);
void flash_attention_backward_mma(float* dqkv, const bf16* dout16, const bf16* qkv16, const float* state,
                                  int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                                  bf16* dqkv16 = nullptr, float* partials = nullptr);

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab);
template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, int64_t rows, int64_t vocab, double grad_scale);

// Over a window [start, start + valid) of a vocabulary of `vocab` ids (vocab_window_kernels.cpp):
// ids are checked against `vocab` (token ids >= 0; targets may be < 0, ignored).
template <typename T>
void embedding_lookup_window(T* out, const int32_t* tokens, const T* wte, int64_t n_tokens, int64_t channels,
                             int64_t start, int64_t valid, int64_t vocab);
template <typename T>
void position_add(T* out, const T* wpe, int64_t rows, int64_t channels, int64_t first_token, int64_t seq_len);
template <typename T>
void embedding_backward_window(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                               int64_t channels, int64_t start, int64_t valid, int64_t vocab, int64_t seq_len);
// L: the logits' type, T's or (bf16-mixed's logits) bf16 read into fp32 statistics.
template <typename T, typename L = T>
void logits_row_max(T* row_max, const L* logits, const int32_t* targets, int64_t rows, int64_t cols, int64_t valid,
                    int64_t vocab);
template <typename T, typename L = T>
void logits_exp_sums(T* sums, const L* logits, const T* row_max, const int32_t* targets, int64_t rows, int64_t cols,
                     int64_t start, int64_t valid);
template <typename T>
void cross_entropy_from_sums(T* losses, T* logsumexp, const T* row_max, const T* sums, const int32_t* targets,
                             int64_t rows);
template <typename T, typename L = T>
void cross_entropy_backward_window(L* logits, const T* logsumexp, const int32_t* targets, int64_t rows, int64_t cols,
                                   int64_t start, int64_t valid, int64_t vocab, double grad_scale);
// bf16 logits in place (bf16-mixed): the fp32 arithmetic on their values, the gradient rounded once.
void cross_entropy_backward_window(bf16* logits, const float* logsumexp, const int32_t* targets, int64_t rows,
                                   int64_t cols, int64_t start, int64_t valid, int64_t vocab, double grad_scale);
// losses[rows] and, in place, the gradient of the logits' whole vocabulary [0, vocab) (columns past
// it padding): the bits of logits_row_max, logits_exp_sums, cross_entropy_from_sums and
// cross_entropy_backward_window, each row read while it is in cache. L: T, or bf16 with T float.
template <typename T, typename L = T>
void cross_entropy_with_gradient(T* losses, L* logits, const int32_t* targets, int64_t rows, int64_t cols,
                                 int64_t vocab, double grad_scale);

template <typename T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1, double beta2, double eps,
           double weight_decay, int64_t step, double grad_scale);

// Sum of squares accumulated in fp64, in fixed-size blocks summed in order.
template <typename T>
double sum_squares(const T* x, int64_t n);

}  // namespace tripod::cpu
