// CPU kernels, templated on the element type (float or double). Every reduction runs in an
// order that does not depend on the number of OpenMP threads, so a run is bit-reproducible and
// its results do not change when the thread count does.
#pragma once
#include <cstdint>

namespace tripod::cpu {

// C = alpha * op(A) @ op(B) + beta * C through OpenBLAS (cblas_sgemm / cblas_dgemm).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t n_tokens,
                       int64_t seq_len, int64_t channels, int64_t vocab);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                        int64_t seq_len, int64_t channels);

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t rows, int64_t channels, double eps);
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t rows, int64_t channels);

template <typename T>
void bias_add(T* out, const T* bias, int64_t rows, int64_t channels);
template <typename T>
void bias_grad(T* dbias, const T* dout, int64_t rows, int64_t channels);

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t batch, int64_t seq_len, int64_t channels,
                       int64_t n_head);
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t n_head);

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t rows, int64_t vocab);
template <typename T>
void cross_entropy_backward(T* logits, const int32_t* targets, int64_t rows, int64_t vocab, double grad_scale);

template <typename T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1, double beta2, double eps,
           double weight_decay, int64_t step, double grad_scale);

// Sum of squares accumulated in fp64, in fixed-size blocks summed in order.
template <typename T>
double sum_squares(const T* x, int64_t n);

}  // namespace tripod::cpu
