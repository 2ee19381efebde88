// The CPU backend's transformer operations: argument checks, dtype dispatch, the kernel call.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cuda/host/attention_choice.h"
#include "backend/cuda/host/launch_geometry.h"
#include "backend/kernels/flash_backward_warp.h"

namespace tripod::cpu {

void CpuBackend::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                   int64_t seq_len) {
  const char* op = "embedding_forward";
  dispatch_float(wte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::embedding_forward<T>(ptr<T>(out, op), ptr<int32_t>(tokens, op), ptr<T>(wte, op), ptr<T>(wpe, op),
                              tokens.numel(), seq_len, wte.dim(1), wte.dim(0));
  });
}

void CpuBackend::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                    int64_t seq_len) {
  const char* op = "embedding_backward";
  dispatch_float(dwte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::embedding_backward<T>(ptr<T>(dwte, op), ptr<T>(dwpe, op), ptr<T>(dout, op), ptr<int32_t>(tokens, op),
                               tokens.numel(), seq_len, dwte.dim(1));
  });
}

void CpuBackend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                   const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layernorm_forward";
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t c = weight.numel();
    cpu::layernorm_forward<T>(ptr<T>(out, op), ptr<T>(mean, op), ptr<T>(rstd, op), ptr<T>(inp, op),
                              ptr<T>(weight, op), ptr<T>(bias, op), inp.numel() / c, c, eps);
  });
}

Tensor CpuBackend::bf16_layernorm_operand(const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                          const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layernorm_operand";
  const int64_t c = weight.numel();
  Tensor copy = alloc_for_overwrite(inp.shape(), DType::BF16);
  cpu::layernorm_forward_to_bf16(ptr<bf16>(copy, op), ptr<float>(mean, op), ptr<float>(rstd, op), ptr<float>(inp, op),
                                 ptr<float>(weight, op), ptr<float>(bias, op), inp.numel() / c, c, eps);
  return copy;
}

void CpuBackend::layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                                    const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t c = weight.numel();
    cpu::layernorm_backward<T>(ptr<T>(dinp, op), ptr<T>(dweight, op), ptr<T>(dbias, op), ptr<T>(dout, op),
                               ptr<T>(inp, op), ptr<T>(weight, op), ptr<T>(mean, op), ptr<T>(rstd, op),
                               inp.numel() / c, c);
  });
}

void CpuBackend::bias_add(const Tensor& out, const Tensor& bias) {
  dispatch_float(out.dtype(), "bias_add", [&](auto zero) {
    using T = decltype(zero);
    cpu::bias_add<T>(ptr<T>(out, "bias_add"), ptr<T>(bias, "bias_add"), out.numel() / bias.numel(), bias.numel());
  });
}

void CpuBackend::bias_grad(const Tensor& dbias, const Tensor& dout) {
  dispatch_float(dout.dtype(), "bias_grad", [&](auto zero) {
    using T = decltype(zero);
    cpu::bias_grad<T>(ptr<T>(dbias, "bias_grad"), ptr<T>(dout, "bias_grad"), dout.numel() / dbias.numel(),
                      dbias.numel());
  });
}

// A bf16 input (bf16-mixed's pre-activation; for the backward also its bf16 output gradient) with
// an fp32 output: their exactly widened values.
void CpuBackend::gelu_forward(const Tensor& out, const Tensor& inp) {
  const char* op = "gelu_forward";
  if (inp.dtype() == DType::BF16)
    return cpu::gelu_forward<float, bf16>(ptr<float>(out, op), ptr<bf16>(inp, op), inp.numel());
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::gelu_forward<T>(ptr<T>(out, op), ptr<T>(inp, op), inp.numel());
  });
}

Tensor CpuBackend::bf16_gelu_operand(const Tensor& x) {
  const char* op = "gelu_operand";
  Tensor copy = alloc_for_overwrite(x.shape(), DType::BF16);
  if (x.dtype() == DType::BF16) cpu::gelu_forward_to_bf16(ptr<bf16>(copy, op), ptr<bf16>(x, op), x.numel());
  else cpu::gelu_forward_to_bf16(ptr<bf16>(copy, op), ptr<float>(x, op), x.numel());
  return copy;
}

void CpuBackend::gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  if (inp.dtype() == DType::BF16 && dout.dtype() == DType::BF16)
    return cpu::gelu_backward<float, bf16, bf16>(ptr<float>(dinp, op), ptr<bf16>(inp, op), ptr<bf16>(dout, op),
                                                 inp.numel());
  if (inp.dtype() == DType::BF16)
    return cpu::gelu_backward<float, bf16, float>(ptr<float>(dinp, op), ptr<bf16>(inp, op), ptr<float>(dout, op),
                                                  inp.numel());
  dispatch_float(inp.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::gelu_backward<T>(ptr<T>(dinp, op), ptr<T>(inp, op), ptr<T>(dout, op), inp.numel());
  });
}

bool CpuBackend::takes_flash_attention(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
  return cuda::takes_flash_attention(attention_kernel_, dtype, fp32_matmul(), seq_len, channels, n_head,
                                     cuda::h200_limits().shared_per_block_optin);
}

std::string CpuBackend::attention_declined(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
  return cuda::flash_attention_declined(attention_kernel_, dtype, fp32_matmul(), seq_len, channels, n_head,
                                        cuda::h200_limits().shared_per_block_optin);
}

DType CpuBackend::attention_input_dtype(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
  return cuda::reads_bf16_qkv(attention_kernel_, dtype, fp32_matmul(), seq_len, channels, n_head,
                              cuda::h200_limits().shared_per_block_optin)
             ? DType::BF16
             : dtype;
}

void CpuBackend::attention_forward(const Tensor& out, const Tensor& probs, const Tensor& qkv, int64_t n_head) {
  const char* op = "attention_forward";
  check_attention_state(probs, qkv, n_head, op);
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  if (qkv.dtype() == DType::BF16) {  // attention_input_dtype's: flash-mma reads it as it is
    cpu::flash_attention_forward_mma(ptr<float>(out, op), ptr<float>(probs, op), ptr<bf16>(qkv, op), batch, seq_len,
                                     channels, n_head);
    return;
  }
  if (takes_flash_attention(qkv.dtype(), seq_len, channels, n_head)) {
    if (attention_kernel_ == cuda::AttentionKernel::FlashMma)
      cpu::flash_attention_forward_mma(ptr<float>(out, op), ptr<float>(probs, op), ptr<float>(qkv, op), batch, seq_len,
                                       channels, n_head);
    else
      cpu::flash_attention_forward(ptr<float>(out, op), ptr<float>(probs, op), ptr<float>(qkv, op), batch, seq_len,
                                   channels, n_head);
    return;
  }
  dispatch_float(qkv.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::attention_forward<T>(ptr<T>(out, op), ptr<T>(probs, op), ptr<T>(qkv, op), qkv.dim(0), qkv.dim(1),
                              qkv.dim(2) / 3, n_head, fp32_matmul() == Fp32Matmul::Bf16Operands);
  });
}

Tensor CpuBackend::bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) {
  const char* op = "attention_operand";
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  if (!cuda::flash_mma_runs(attention_kernel_, qkv.dtype(), fp32_matmul(), seq_len, channels, n_head,
                            cuda::h200_limits().shared_per_block_optin, false))
    return Backend::bf16_attention_operand(state, qkv, n_head);
  check_attention_state(state, qkv, n_head, op);
  Tensor copy = alloc_for_overwrite({batch, seq_len, channels}, DType::BF16);
  if (qkv.dtype() == DType::BF16)  // attention_input_dtype's
    cpu::flash_attention_forward_mma(nullptr, ptr<float>(state, op), ptr<bf16>(qkv, op), batch, seq_len, channels,
                                     n_head, ptr<bf16>(copy, op));
  else
    cpu::flash_attention_forward_mma(nullptr, ptr<float>(state, op), ptr<float>(qkv, op), batch, seq_len, channels,
                                     n_head, ptr<bf16>(copy, op));
  return copy;
}

Tensor CpuBackend::bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state,
                                                   int64_t n_head, const Tensor& dbias) {
  const char* op = "attention_backward_operand";
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  const bool given = qkv.dtype() == DType::BF16;  // attention_input_dtype's: flash-mma's
  if (dbias.dtype() != DType::F32 || dbias.numel() != 3 * channels ||
      !cuda::flash_mma_runs(attention_kernel_, qkv.dtype(), fp32_matmul(), seq_len, channels, n_head,
                            cuda::h200_limits().shared_per_block_optin, true))
    return Backend::bf16_attention_backward_operand(dout, qkv, state, n_head, dbias);
  check_attention_state(state, qkv, n_head, op);
  Tensor copy = alloc_for_overwrite({batch, seq_len, 3 * channels}, DType::BF16);
  const kernels::flash::Problem p{batch, seq_len, channels, n_head, 0.0f};
  Tensor partials = alloc_for_overwrite({kernels::flash_mma::column_sum_rows(p), 3 * channels}, DType::F32);
  if (batch * seq_len == 0) return copy;
  bf16* dqkv16 = ptr<bf16>(copy, op);
  float* sums = ptr<float>(partials, op);
  const float* s = ptr<float>(state, op);
  if (!given)
    cpu::flash_attention_backward_mma(nullptr, ptr<float>(dout, op), ptr<float>(qkv, op), s, batch, seq_len, channels,
                                      n_head, dqkv16, sums);
  else if (dout.dtype() == DType::BF16)
    cpu::flash_attention_backward_mma(nullptr, ptr<bf16>(dout, op), ptr<bf16>(qkv, op), s, batch, seq_len, channels,
                                      n_head, dqkv16, sums);
  else
    cpu::flash_attention_backward_mma(nullptr, ptr<float>(dout, op), ptr<bf16>(qkv, op), s, batch, seq_len, channels,
                                      n_head, dqkv16, sums);
  bias_grad(dbias, partials);
  return copy;
}

void CpuBackend::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& probs,
                                    int64_t n_head) {
  const char* op = "attention_backward";
  check_attention_state(probs, qkv, n_head, op);
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  if (qkv.dtype() == DType::BF16) {  // attention_input_dtype's: flash-mma reads it, and a bf16 dout, as they are
    if (dout.dtype() == DType::BF16)
      cpu::flash_attention_backward_mma(ptr<float>(dqkv, op), ptr<bf16>(dout, op), ptr<bf16>(qkv, op),
                                        ptr<float>(probs, op), batch, seq_len, channels, n_head);
    else
      cpu::flash_attention_backward_mma(ptr<float>(dqkv, op), ptr<float>(dout, op), ptr<bf16>(qkv, op),
                                        ptr<float>(probs, op), batch, seq_len, channels, n_head);
    return;
  }
  if (takes_flash_attention(qkv.dtype(), seq_len, channels, n_head)) {
    if (attention_kernel_ == cuda::AttentionKernel::FlashMma)
      cpu::flash_attention_backward_mma(ptr<float>(dqkv, op), ptr<float>(dout, op), ptr<float>(qkv, op),
                                        ptr<float>(probs, op), batch, seq_len, channels, n_head);
    else
      cpu::flash_attention_backward(ptr<float>(dqkv, op), ptr<float>(dout, op), ptr<float>(qkv, op),
                                    ptr<float>(probs, op), batch, seq_len, channels, n_head);
    return;
  }
  dispatch_float(qkv.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::attention_backward<T>(ptr<T>(dqkv, op), ptr<T>(dout, op), ptr<T>(qkv, op), ptr<T>(probs, op), qkv.dim(0),
                               qkv.dim(1), qkv.dim(2) / 3, n_head, fp32_matmul() == Fp32Matmul::Bf16Operands);
  });
}

void CpuBackend::cross_entropy_forward(const Tensor& losses, const Tensor& logits, const Tensor& targets) {
  const char* op = "cross_entropy_forward";
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::cross_entropy_forward<T>(ptr<T>(losses, op), ptr<T>(logits, op), ptr<int32_t>(targets, op), targets.numel(),
                                  logits.dim(-1));
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, double grad_scale) {
  const char* op = "cross_entropy_backward";
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::cross_entropy_backward<T>(ptr<T>(logits, op), ptr<int32_t>(targets, op), targets.numel(), logits.dim(-1),
                                   grad_scale);
  });
}

// ---- vocabulary windows: kernel errors (bad ids) are prefixed with the operation ----

namespace {
template <typename Fn>
void named(const char* op, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    throw Error(str_cat(op, ": ", e.what()));
  }
}
}  // namespace

void CpuBackend::embedding_lookup_window(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                                         VocabWindow w) {
  const char* op = "embedding_lookup_window";
  dispatch_float(wte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    named(op, [&] {
      cpu::embedding_lookup_window<T>(ptr<T>(out, op), ptr<int32_t>(tokens, op), ptr<T>(wte, op), tokens.numel(),
                                      wte.dim(-1), w.start, w.valid, w.vocab);
    });
  });
}

void CpuBackend::position_add(const Tensor& out, const Tensor& wpe, int64_t first_token, int64_t seq_len) {
  const char* op = "position_add";
  dispatch_float(out.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = wpe.dim(-1);
    cpu::position_add<T>(ptr<T>(out, op), ptr<T>(wpe, op), C ? out.numel() / C : 0, C, first_token, seq_len);
  });
}

void CpuBackend::embedding_backward_window(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                                           const Tensor& tokens, VocabWindow w, int64_t seq_len) {
  const char* op = "embedding_backward_window";
  dispatch_float(dwte.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    named(op, [&] {
      cpu::embedding_backward_window<T>(ptr<T>(dwte, op), ptr<T>(dwpe, op), ptr<T>(dout, op),
                                        ptr<int32_t>(tokens, op), tokens.numel(), dwte.dim(-1), w.start, w.valid,
                                        w.vocab, seq_len);
    });
  });
}

void CpuBackend::logits_row_max(const Tensor& row_max, const Tensor& logits, const Tensor& targets, VocabWindow w) {
  const char* op = "logits_row_max";
  if (logits.dtype() == DType::BF16)  // bf16-mixed's logits, fp32 statistics
    return named(op, [&] {
      cpu::logits_row_max<float, bf16>(ptr<float>(row_max, op), ptr<bf16>(logits, op), ptr<int32_t>(targets, op),
                                       row_max.numel(), logits.numel() / std::max<int64_t>(row_max.numel(), 1),
                                       w.valid, w.vocab);
    });
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    named(op, [&] {
      cpu::logits_row_max<T>(ptr<T>(row_max, op), ptr<T>(logits, op), ptr<int32_t>(targets, op), row_max.numel(),
                             logits.numel() / std::max<int64_t>(row_max.numel(), 1), w.valid, w.vocab);
    });
  });
}

void CpuBackend::logits_exp_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                 const Tensor& targets, VocabWindow w) {
  const char* op = "logits_exp_sums";
  if (logits.dtype() == DType::BF16) {  // bf16-mixed's logits, fp32 statistics
    const int64_t rows = row_max.numel();
    return cpu::logits_exp_sums<float, bf16>(ptr<float>(sums, op), ptr<bf16>(logits, op), ptr<float>(row_max, op),
                                             ptr<int32_t>(targets, op), rows,
                                             logits.numel() / std::max<int64_t>(rows, 1), w.start, w.valid);
  }
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t rows = row_max.numel();
    cpu::logits_exp_sums<T>(ptr<T>(sums, op), ptr<T>(logits, op), ptr<T>(row_max, op), ptr<int32_t>(targets, op),
                            rows, logits.numel() / std::max<int64_t>(rows, 1), w.start, w.valid);
  });
}

void CpuBackend::cross_entropy_from_sums(const Tensor& losses, const Tensor& logsumexp, const Tensor& row_max,
                                         const Tensor& sums, const Tensor& targets) {
  const char* op = "cross_entropy_from_sums";
  dispatch_float(losses.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::cross_entropy_from_sums<T>(ptr<T>(losses, op), ptr<T>(logsumexp, op), ptr<T>(row_max, op), ptr<T>(sums, op),
                                    ptr<int32_t>(targets, op), losses.numel());
  });
}

void CpuBackend::cross_entropy_backward_window(const Tensor& logits, const Tensor& logsumexp, const Tensor& targets,
                                               VocabWindow w, double grad_scale) {
  const char* op = "cross_entropy_backward_window";
  if (logits.dtype() == DType::BF16) {  // bf16-mixed's logits, fp32 logsumexp: the gradient rounded once
    const int64_t rows = targets.numel();
    return named(op, [&] {
      cpu::cross_entropy_backward_window(ptr<bf16>(logits, op), ptr<float>(logsumexp, op), ptr<int32_t>(targets, op),
                                         rows, logits.numel() / std::max<int64_t>(rows, 1), w.start, w.valid, w.vocab,
                                         grad_scale);
    });
  }
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t rows = targets.numel();
    named(op, [&] {
      cpu::cross_entropy_backward_window<T>(ptr<T>(logits, op), ptr<T>(logsumexp, op), ptr<int32_t>(targets, op), rows,
                                            logits.numel() / std::max<int64_t>(rows, 1), w.start, w.valid, w.vocab,
                                            grad_scale);
    });
  });
}

void CpuBackend::cross_entropy_with_gradient(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                             int64_t vocab, double grad_scale) {
  const char* op = "cross_entropy_with_gradient";
  const int64_t rows = losses.numel();
  check_loss_with_gradient(op, losses, logits, targets, vocab);
  if (logits.dtype() == DType::BF16)  // bf16-mixed's logits, fp32 statistics and losses
    return named(op, [&] {
      cpu::cross_entropy_with_gradient<float, bf16>(ptr<float>(losses, op), ptr<bf16>(logits, op),
                                                    ptr<int32_t>(targets, op), rows, logits.dim(-1), vocab, grad_scale);
    });
  dispatch_float(logits.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    named(op, [&] {
      cpu::cross_entropy_with_gradient<T>(ptr<T>(losses, op), ptr<T>(logits, op), ptr<int32_t>(targets, op), rows,
                                          logits.dim(-1), vocab, grad_scale);
    });
  });
}

void CpuBackend::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, double lr,
                       double beta1, double beta2, double eps, double weight_decay, int64_t step, double grad_scale) {
  const char* op = "adamw";
  dispatch_float(param.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    cpu::adamw<T>(ptr<T>(param, op), ptr<T>(grad, op), ptr<T>(m, op), ptr<T>(v, op), param.numel(), lr, beta1, beta2,
                  eps, weight_decay, step, grad_scale);
  });
}

}  // namespace tripod::cpu
