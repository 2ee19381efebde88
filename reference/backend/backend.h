// Backend: the tensor operations the model is written in, for one device. The model calls only
// these; a backend knows nothing of the model (no layer names, no parameters) and nothing of
// parallelism. The CPU backend (OpenBLAS + OpenMP) implements them for fp32 and fp64; a CUDA
// backend implements the same interface with cuBLAS and kernels.
//
// Conventions: tensors are row-major and contiguous unless a leading dimension is given.
// "Accumulate" ops add into their output (gradients accumulate over micro-batches);
// the others overwrite it.
#pragma once
#include <memory>
#include <string>

#include "core/tensor.h"

namespace tripod {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;

  // ---- memory ----
  virtual Tensor alloc(const Shape& shape, DType dtype) = 0;  // zero-filled
  virtual void fill(const Tensor& t, double value) = 0;
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;      // equal numel and dtype
  virtual void upload(const void* host, const Tensor& dst) = 0;     // host bytes -> dst
  virtual void download(const Tensor& src, void* host) = 0;         // src -> host bytes

  // ---- dense linear algebra ----
  // C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, with op(X) = X or X^T and leading dims.
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const Tensor& a, int64_t lda, const Tensor& b, int64_t ldb, double beta,
                    const Tensor& c, int64_t ldc) = 0;

  // ---- elementwise and reductions ----
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b) = 0;  // out = a + b
  virtual void add_inplace(const Tensor& acc, const Tensor& x) = 0;           // acc += x
  virtual void scale(const Tensor& t, double factor) = 0;                    // t *= factor
  virtual double sum_squares(const Tensor& t) = 0;  // sum of t^2, accumulated in fp64
  virtual bool all_finite(const Tensor& t) = 0;

  // ---- transformer kernels ----
  // out[N,C] = wte[tokens[N], :] + wpe[n % T, :] for N = B*T tokens.
  virtual void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                 const Tensor& wpe, int64_t seq_len) = 0;
  // Accumulate: dwte[tokens[n]] += dout[n], dwpe[n % T] += dout[n].
  virtual void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                  const Tensor& tokens, int64_t seq_len) = 0;
  // out[N,C] = (inp - mean) * rstd * weight + bias, saving mean[N] and rstd[N].
  virtual void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& inp, const Tensor& weight, const Tensor& bias,
                                 double eps) = 0;
  // Accumulate into dinp[N,C], dweight[C], dbias[C].
  virtual void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                  const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                  const Tensor& mean, const Tensor& rstd) = 0;
  virtual void bias_add(const Tensor& out, const Tensor& bias) = 0;    // out[N,C] += bias[C]
  virtual void bias_grad(const Tensor& dbias, const Tensor& dout) = 0;  // dbias[C] += sum_n dout[n,C]
  // GELU, tanh approximation (GPT-2's "gelu_new").
  virtual void gelu_forward(const Tensor& out, const Tensor& inp) = 0;
  virtual void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) = 0;  // overwrite
  // Causal multi-head attention. qkv[B,T,3C] holds q|k|v, head h in columns [h*hd, (h+1)*hd) of
  // each third. out[B,T,C]; probs[B,H,T,T] keeps the softmax for the backward pass.
  virtual void attention_forward(const Tensor& out, const Tensor& probs, const Tensor& qkv,
                                 int64_t n_head) = 0;
  // Overwrites dqkv[B,T,3C].
  virtual void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& probs, int64_t n_head) = 0;
  // losses[N] = logsumexp(logits[n]) - logits[n, targets[n]]; 0 where targets[n] < 0 (ignored).
  virtual void cross_entropy_forward(const Tensor& losses, const Tensor& logits,
                                     const Tensor& targets) = 0;
  // In place: logits[N,V] becomes grad_scale * (softmax(logits) - onehot(target)); 0 rows if ignored.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      double grad_scale) = 0;

  // ---- optimizer ----
  // Decoupled AdamW (Loshchilov & Hutter) on one tensor; `step` counts from 1 for bias correction.
  // The gradient is used as grad * grad_scale (the clipping coefficient, fused to save a pass).
  virtual void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     double lr, double beta1, double beta2, double eps, double weight_decay,
                     int64_t step, double grad_scale) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tripod
