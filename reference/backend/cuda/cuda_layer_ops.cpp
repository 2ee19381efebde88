// The CUDA backend's transformer operations: dtype dispatch and the kernel launch, with the sizes
// taken from the tensors exactly as the CPU backend takes them (cpu_layer_ops.cpp). Token and
// target ids are checked on the host before upload (backend.h); kernels never index with a bad one.
// Attention lives in cuda_attention_ops.cpp.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/adamw_runs.h"
#include "backend/cuda/kernels/cross_entropy.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/embedding.h"
#include "backend/cuda/kernels/layernorm.h"
#include "backend/cuda/kernels/reductions.h"

namespace tripod::cuda {

void CudaBackend::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                    int64_t seq_len) {
  const char* op = "embedding_forward";
  dispatch_float(wte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::embedding_forward<T>(ptr<T>(out, op), ptr<int32_t>(tokens, op), ptr<T>(wte, op), ptr<T>(wpe, op),
                               tokens.numel(), seq_len, wte.dim(1), wte.dim(0), ctx_);
  });
}

void CudaBackend::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                     int64_t seq_len) {
  const char* op = "embedding_backward";
  dispatch_float(dwte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::embedding_backward<T>(ptr<T>(dwte, op), ptr<T>(dwpe, op), ptr<T>(dout, op), ptr<int32_t>(tokens, op),
                                tokens.numel(), seq_len, dwte.dim(1), dwte.dim(0), ctx_);
  });
}

void CudaBackend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                    const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layernorm_forward";
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t c = weight.numel();
    cuda::layernorm_forward<T>(ptr<T>(out, op), ptr<T>(mean, op), ptr<T>(rstd, op), ptr<T>(inp, op),
                               ptr<T>(weight, op), ptr<T>(bias, op), c ? inp.numel() / c : 0, c, eps, ctx_);
  });
}

void CudaBackend::layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd) {
  const char* op = "layernorm_backward";
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t c = weight.numel();
    cuda::layernorm_backward<T>(ptr<T>(dinp, op), ptr<T>(dweight, op), ptr<T>(dbias, op), ptr<T>(dout, op),
                                ptr<T>(inp, op), ptr<T>(weight, op), ptr<T>(mean, op), ptr<T>(rstd, op),
                                c ? inp.numel() / c : 0, c, fusions_.on(CudaFusion::LayernormGrads), ctx_);
  });
}

void CudaBackend::bias_add(const Tensor& out, const Tensor& bias) {
  const char* op = "bias_add";
  dispatch_float(out.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t c = bias.numel();
    cuda::bias_add<T>(ptr<T>(out, op), ptr<T>(bias, op), c ? out.numel() / c : 0, c, ctx_);
  });
}

void CudaBackend::bias_grad(const Tensor& dbias, const Tensor& dout) {
  const char* op = "bias_grad";
  dispatch_float(dout.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t c = dbias.numel();
    cuda::bias_grad<T>(ptr<T>(dbias, op), ptr<T>(dout, op), c ? dout.numel() / c : 0, c, ctx_);
  });
}

// A bf16 input (bf16-mixed's pre-activation; for the backward also its bf16 output gradient) with
// an fp32 output: their exactly widened values.
void CudaBackend::gelu_forward(const Tensor& out, const Tensor& inp) {
  const char* op = "gelu_forward";
  if (inp.dtype() == DType::BF16)
    return cuda::gelu_forward(ptr<float>(out, op), ptr<bf16>(inp, op), inp.numel(), ctx_);
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::gelu_forward<T>(ptr<T>(out, op), ptr<T>(inp, op), inp.numel(), ctx_);
  });
}

void CudaBackend::gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  if (inp.dtype() == DType::BF16 && dout.dtype() == DType::BF16)
    return cuda::gelu_backward(ptr<float>(dinp, op), ptr<bf16>(inp, op), ptr<bf16>(dout, op), inp.numel(), ctx_);
  if (inp.dtype() == DType::BF16)
    return cuda::gelu_backward(ptr<float>(dinp, op), ptr<bf16>(inp, op), ptr<float>(dout, op), inp.numel(), ctx_);
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::gelu_backward<T>(ptr<T>(dinp, op), ptr<T>(inp, op), ptr<T>(dout, op), inp.numel(), ctx_);
  });
}

void CudaBackend::cross_entropy_forward(const Tensor& losses, const Tensor& logits, const Tensor& targets) {
  const char* op = "cross_entropy_forward";
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::cross_entropy_forward<T>(ptr<T>(losses, op), ptr<T>(logits, op), ptr<int32_t>(targets, op),
                                   targets.numel(), logits.dim(-1), ctx_);
  });
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, double grad_scale) {
  const char* op = "cross_entropy_backward";
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::cross_entropy_backward<T>(ptr<T>(logits, op), ptr<int32_t>(targets, op), targets.numel(), logits.dim(-1),
                                    grad_scale, ctx_);
  });
}

void CudaBackend::embedding_lookup_window(const Tensor& out, const Tensor& tokens, const Tensor& wte, VocabWindow w) {
  const char* op = "embedding_lookup_window";
  dispatch_float(wte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::embedding_lookup_window<T>(ptr<T>(out, op), ptr<int32_t>(tokens, op), ptr<T>(wte, op), tokens.numel(),
                                     wte.dim(-1), w.start, std::min<int64_t>(w.valid, wte.dim(0)), ctx_);
  });
}

void CudaBackend::position_add(const Tensor& out, const Tensor& wpe, int64_t first_token, int64_t seq_len) {
  const char* op = "position_add";
  dispatch_float(out.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t c = wpe.dim(-1);
    cuda::position_add<T>(ptr<T>(out, op), ptr<T>(wpe, op), c ? out.numel() / c : 0, c, first_token, seq_len, ctx_);
  });
}

void CudaBackend::embedding_backward_window(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                            const Tensor& tokens, VocabWindow w, int64_t seq_len) {
  const char* op = "embedding_backward_window";
  dispatch_float(dwte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::embedding_backward_window<T>(ptr<T>(dwte, op), ptr<T>(dwpe, op), ptr<T>(dout, op),
                                       ptr<int32_t>(tokens, op), tokens.numel(), dwte.dim(-1), w.start,
                                       std::min<int64_t>(w.valid, dwte.dim(0)), seq_len, ctx_);
  });
}

namespace {

// f(S{}, L{}) with the statistics' type S and the logits' L: (T, T) for fp32 or fp64 logits,
// (float, bf16) for bf16-mixed's bf16 logits.
template <class F>
void dispatch_logits(DType logits, const char* op, F&& f) {
  if (logits == DType::BF16) return f(float{}, bf16{});
  dispatch_float(logits, op, [&](auto zero) { f(zero, zero); });
}

}  // namespace

void CudaBackend::logits_row_max(const Tensor& row_max, const Tensor& logits, const Tensor& /*targets*/,
                                 VocabWindow w) {
  const char* op = "logits_row_max";
  dispatch_logits(logits.dtype(), op, [&](auto s, auto l) {
    using S = decltype(s);
    using L = decltype(l);
    const int64_t rows = row_max.numel();
    cuda::logits_row_max(ptr<S>(row_max, op), static_cast<const L*>(ptr<L>(logits, op)), rows,
                         logits.numel() / std::max<int64_t>(rows, 1), w.valid, ctx_);
  });
}

void CudaBackend::logits_exp_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                  const Tensor& targets, VocabWindow w) {
  const char* op = "logits_exp_sums";
  dispatch_logits(logits.dtype(), op, [&](auto s, auto l) {
    using S = decltype(s);
    using L = decltype(l);
    const int64_t rows = row_max.numel();
    cuda::logits_exp_sums(ptr<S>(sums, op), static_cast<const L*>(ptr<L>(logits, op)),
                          static_cast<const S*>(ptr<S>(row_max, op)), ptr<int32_t>(targets, op), rows,
                          logits.numel() / std::max<int64_t>(rows, 1), w.start, w.valid, ctx_);
  });
}

void CudaBackend::logits_stats(const Tensor& row_max, const Tensor& sums, const Tensor& logits, const Tensor& targets,
                               VocabWindow w) {
  if (!fusions_.on(CudaFusion::LossStats)) return Backend::logits_stats(row_max, sums, logits, targets, w);
  const char* op = "logits_stats";
  dispatch_logits(logits.dtype(), op, [&](auto s, auto l) {
    using S = decltype(s);
    using L = decltype(l);
    const int64_t rows = row_max.numel();
    cuda::logits_stats(ptr<S>(row_max, op), ptr<S>(sums, op), static_cast<const L*>(ptr<L>(logits, op)),
                       ptr<int32_t>(targets, op), rows, logits.numel() / std::max<int64_t>(rows, 1), w.start,
                       w.valid, ctx_);
  });
}

void CudaBackend::cross_entropy_from_sums(const Tensor& losses, const Tensor& logsumexp, const Tensor& row_max,
                                          const Tensor& sums, const Tensor& targets) {
  const char* op = "cross_entropy_from_sums";
  dispatch_float(losses.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::cross_entropy_from_sums<T>(ptr<T>(losses, op), ptr<T>(logsumexp, op), ptr<T>(row_max, op),
                                     ptr<T>(sums, op), ptr<int32_t>(targets, op), losses.numel(), ctx_);
  });
}

void CudaBackend::cross_entropy_backward_window(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                                VocabWindow w, double grad_scale) {
  const char* op = "cross_entropy_backward_window";
  dispatch_logits(logits.dtype(), op, [&](auto s, auto l) {
    using S = decltype(s);
    using L = decltype(l);
    const int64_t rows = targets.numel();
    cuda::cross_entropy_backward_window(ptr<L>(logits, op), static_cast<const S*>(ptr<S>(logsumexp, op)),
                                        ptr<int32_t>(targets, op), rows, logits.numel() / std::max<int64_t>(rows, 1),
                                        w.start, w.valid, grad_scale, ctx_);
  });
}

void CudaBackend::cross_entropy_with_gradient(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                              int64_t vocab, double grad_scale) {
  if (!fusions_.on(CudaFusion::LossGradient))
    return Backend::cross_entropy_with_gradient(losses, logits, targets, vocab, grad_scale);
  const char* op = "cross_entropy_with_gradient";
  const int64_t rows = losses.numel();
  check_loss_with_gradient(op, losses, logits, targets, vocab);
  dispatch_logits(logits.dtype(), op, [&](auto s, auto l) {
    using S = decltype(s);
    using L = decltype(l);
    cuda::cross_entropy_with_gradient<S, L>(ptr<S>(losses, op), ptr<L>(logits, op), ptr<int32_t>(targets, op), rows,
                                            logits.dim(-1), vocab, grad_scale, ctx_);
  });
}

void CudaBackend::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, double lr,
                        double beta1, double beta2, double eps, double weight_decay, int64_t step, double grad_scale) {
  const char* op = "adamw";
  dispatch_float(param.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::adamw<T>(ptr<T>(param, op), ptr<T>(grad, op), ptr<T>(m, op), ptr<T>(v, op), param.numel(), lr, beta1, beta2,
                   eps, weight_decay, step, grad_scale, ctx_);
  });
}

void CudaBackend::adamw_runs(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                             const std::vector<AdamWRun>& runs, double lr, double beta1, double beta2, double eps,
                             int64_t step, double grad_scale) {
  const char* op = "adamw_runs";
  check_adamw_runs(params, grads, m, v, runs);
  std::vector<int64_t> offsets, lengths;
  std::vector<double> decays;
  for (const AdamWRun& r : runs) {
    if (r.length == 0) continue;
    offsets.push_back(r.offset);
    lengths.push_back(r.length);
    decays.push_back(r.weight_decay);
  }
  dispatch_float(params.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cuda::adamw_runs<T>(ptr<T>(params, op), ptr<T>(grads, op), ptr<T>(m, op), ptr<T>(v, op),
                        static_cast<int>(offsets.size()), offsets.data(), lengths.data(), decays.data(), lr, beta1,
                        beta2, eps, step, grad_scale, ctx_);
  });
}

}  // namespace tripod::cuda
