// The CUDA backend's attention: the GEMM attention (strided-batched products and a causal softmax,
// attention.cu) or flash attention's kernels (TRIPOD_CUDA_ATTENTION: flash_attention.cu's blocks,
// flash_mma.cu's register tiles), forward and backward, and their outputs written as the next
// GEMM's bf16 operand where the kernels can (attention_operand, attention_backward_operand).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/host/gemm_layout.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/flash_attention.h"
#include "backend/kernels/flash_backward_warp.h"

namespace tripod::cuda {

// Under the bf16-operand policy, fp32 attention multiplies bf16 copies (the CPU backend rounds at
// the same points): their scratch; null otherwise (products in the tensors' precision).
bf16* CudaBackend::attention_bf16_scratch(DType dtype, int64_t batch, int64_t seq_len, int64_t channels,
                                          int64_t n_head) {
  if (dtype != DType::F32 || fp32_matmul() != Fp32Matmul::Bf16Operands) return nullptr;
  return grown(attention_scratch16_, cuda::attention_bf16_scratch_elements(batch, seq_len, channels, n_head),
               DType::BF16)
      .device_data<bf16>();
}

// Scratch for flash-mma's bf16 copies of qkv (unless the model's qkv is bf16) and the backward's of
// dout (unless the model's dout is) (flash_attention.h), for one call.
Tensor CudaBackend::flash_mma_copies(int64_t batch, int64_t seq_len, int64_t channels, bool backward, bool qkv_given,
                                    bool dout_given) {
  const int64_t elements = cuda::flash_mma_copy_elements(batch, seq_len, channels, backward, qkv_given, dout_given);
  return elements > 0 ? alloc_for_overwrite({elements}, DType::BF16) : Tensor();
}

bool CudaBackend::takes_flash_attention(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
  return cuda::takes_flash_attention(attention_kernel_, dtype, fp32_matmul(), seq_len, channels, n_head,
                                     ctx_.limits.shared_per_block_optin);
}

DType CudaBackend::attention_input_dtype(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
  return fusions_.on(CudaFusion::Bf16Qkv) &&
                 cuda::reads_bf16_qkv(attention_kernel_, dtype, fp32_matmul(), seq_len, channels, n_head,
                                      ctx_.limits.shared_per_block_optin)
             ? DType::BF16
             : dtype;
}

std::string CudaBackend::attention_declined(DType dtype, int64_t seq_len, int64_t channels, int64_t n_head) const {
  return cuda::flash_attention_declined(attention_kernel_, dtype, fp32_matmul(), seq_len, channels, n_head,
                                        ctx_.limits.shared_per_block_optin);
}

void CudaBackend::attention_forward(const Tensor& out, const Tensor& probs, const Tensor& qkv, int64_t n_head) {
  const char* op = "attention_forward";
  check_attention_state(probs, qkv, n_head, op);
  const bool given = qkv.dtype() == DType::BF16;  // attention_input_dtype's: read as it is
  if (given || takes_flash_attention(qkv.dtype(), qkv.dim(1), qkv.dim(2) / 3, n_head)) {
    const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
    if (attention_kernel_ == cuda::AttentionKernel::FlashMma) {
      flash_mma_forward(ptr<float>(out, op), nullptr, probs, qkv, n_head, op);
    } else {
      cuda::flash_attention_forward(ptr<float>(out, op), ptr<float>(probs, op), ptr<float>(qkv, op), batch, seq_len,
                                    channels, n_head, ctx_);
    }
    return;
  }
  dispatch_float(qkv.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
    Tensor& scratch = grown(attention_scratch_, cuda::attention_scratch_elements(batch, seq_len, channels), qkv.dtype());
    cuda::attention_forward<T>(ptr<T>(out, op), ptr<T>(probs, op), ptr<T>(qkv, op), scratch.device_data<T>(),
                               attention_bf16_scratch(qkv.dtype(), batch, seq_len, channels, n_head), batch, seq_len,
                               channels, n_head, ctx_);
  });
}

void CudaBackend::flash_mma_forward(float* out, bf16* out16, const Tensor& state, const Tensor& qkv, int64_t n_head,
                                    const char* op) {
  const bool given = qkv.dtype() == DType::BF16;
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  Tensor copies = flash_mma_copies(batch, seq_len, channels, false, given);
  cuda::flash_attention_forward_mma(out, ptr<float>(state, op), given ? nullptr : ptr<float>(qkv, op),
                                    copies.defined() ? copies.device_data<bf16>() : nullptr, batch, seq_len, channels,
                                    n_head, ctx_, given ? ptr<bf16>(qkv, op) : nullptr, out16);
}

Tensor CudaBackend::bf16_attention_operand(const Tensor& state, const Tensor& qkv, int64_t n_head) {
  const char* op = "attention_operand";
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3, rows = batch * seq_len;
  const bool operand_fused =
      fusions_.on(CudaFusion::OperandProducers) && !cuda::operand_copy_shape(rows, channels).padded();
  if (operand_fused && cuda::flash_mma_runs(attention_kernel_, qkv.dtype(), fp32_matmul(), seq_len, channels, n_head,
                                            ctx_.limits.shared_per_block_optin, false)) {
    check_attention_state(state, qkv, n_head, op);  // flash-mma's out written as bf16 only
    Tensor copy = alloc_for_overwrite({rows, channels}, DType::BF16);
    flash_mma_forward(nullptr, copy.device_data<bf16>(), state, qkv, n_head, op);
    return copy;
  }
  if (!operand_fused || qkv.dtype() != DType::F32 || takes_flash_attention(qkv.dtype(), seq_len, channels, n_head))
    return Backend::bf16_attention_operand(state, qkv, n_head);
  check_attention_state(state, qkv, n_head, op);
  Tensor copy = alloc_for_overwrite({rows, channels}, DType::BF16);
  Tensor& scratch = grown(attention_scratch_, cuda::attention_scratch_elements(batch, seq_len, channels), qkv.dtype());
  cuda::attention_forward<float>(nullptr, ptr<float>(state, op), ptr<float>(qkv, op), scratch.device_data<float>(),
                                 attention_bf16_scratch(qkv.dtype(), batch, seq_len, channels, n_head), batch,
                                 seq_len, channels, n_head, ctx_, copy.device_data<bf16>());
  return copy;
}

void CudaBackend::attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& probs,
                                     int64_t n_head) {
  const char* op = "attention_backward";
  check_attention_state(probs, qkv, n_head, op);
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  if (qkv.dtype() == DType::BF16 || takes_flash_attention(qkv.dtype(), seq_len, channels, n_head)) {
    flash_backward(ptr<float>(dqkv, op), nullptr, nullptr, dout, qkv, probs, n_head, op);
    return;
  }
  dispatch_float(qkv.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    Tensor& score_grads =
        grown(score_grads_, cuda::attention_score_grad_elements(batch, seq_len, n_head), qkv.dtype());
    Tensor& scratch = grown(attention_scratch_, cuda::attention_scratch_elements(batch, seq_len, channels), qkv.dtype());
    cuda::attention_backward<T>(ptr<T>(dqkv, op), score_grads.device_data<T>(), scratch.device_data<T>(),
                                attention_bf16_scratch(qkv.dtype(), batch, seq_len, channels, n_head), ptr<T>(dout, op),
                                ptr<T>(qkv, op), ptr<T>(probs, op), batch, seq_len, channels, n_head, ctx_);
  });
}

void CudaBackend::flash_backward(float* dqkv, bf16* dqkv16, float* partials, const Tensor& dout, const Tensor& qkv,
                                 const Tensor& state, int64_t n_head, const char* op) {
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3;
  // attention_input_dtype's bf16 qkv, and with it a bf16 dout: read as they are
  const bool given = qkv.dtype() == DType::BF16, dout_given = given && dout.dtype() == DType::BF16;
  Tensor& delta = grown(attention_scratch_, cuda::flash_attention_delta_elements(batch, seq_len, n_head), DType::F32);
  Tensor copies;  // the register kernels' bf16 copies of qkv and dout, freed (stream-ordered) after
  if (cuda::flash_backward_in_registers(attention_kernel_, channels, n_head))
    copies = flash_mma_copies(batch, seq_len, channels, true, given, dout_given);
  cuda::flash_attention_backward(dqkv, delta.device_data<float>(), dout_given ? nullptr : ptr<float>(dout, op),
                                 given ? nullptr : ptr<float>(qkv, op), ptr<float>(state, op), batch, seq_len, channels,
                                 n_head, ctx_, attention_kernel_,
                                 copies.defined() ? copies.device_data<bf16>() : nullptr,
                                 given ? ptr<bf16>(qkv, op) : nullptr, dout_given ? ptr<bf16>(dout, op) : nullptr,
                                 kernels::flash_mma::OperandOut{dqkv16, partials});
}

Tensor CudaBackend::bf16_attention_backward_operand(const Tensor& dout, const Tensor& qkv, const Tensor& state,
                                                    int64_t n_head, const Tensor& dbias) {
  const char* op = "attention_backward_operand";
  const int64_t batch = qkv.dim(0), seq_len = qkv.dim(1), channels = qkv.dim(2) / 3, rows = batch * seq_len;
  const bool operand_fused =
      fusions_.on(CudaFusion::OperandProducers) && !cuda::operand_copy_shape(rows, 3 * channels).padded() &&
      dbias.dtype() == DType::F32 && dbias.numel() == 3 * channels;
  // flash-mma's register backward writes dqkv as its bf16 operand, with the bias gradient's partial
  // sums that bias_grad then adds (flash_backward_warp.h's store_operand_rows): no fp32 dqkv.
  if (operand_fused && cuda::flash_mma_runs(attention_kernel_, qkv.dtype(), fp32_matmul(), seq_len, channels, n_head,
                                            ctx_.limits.shared_per_block_optin, true)) {
    check_attention_state(state, qkv, n_head, op);
    Tensor copy = alloc_for_overwrite({rows, 3 * channels}, DType::BF16);
    const kernels::flash::Problem p{batch, seq_len, channels, n_head, 0.0f};
    Tensor partials = alloc_for_overwrite({kernels::flash_mma::column_sum_rows(p), 3 * channels}, DType::F32);
    if (rows > 0) {
      flash_backward(nullptr, copy.device_data<bf16>(), partials.device_data<float>(), dout, qkv, state, n_head, op);
      bias_grad(dbias, partials);
    }
    return copy;
  }
  // The flash block kernels' backward writes dqkv from its own kernels: it takes the default (dqkv, then the copy).
  if (!operand_fused || qkv.dtype() != DType::F32 || takes_flash_attention(qkv.dtype(), seq_len, channels, n_head))
    return Backend::bf16_attention_backward_operand(dout, qkv, state, n_head, dbias);
  check_attention_state(state, qkv, n_head, op);
  Tensor copy = alloc_for_overwrite({rows, 3 * channels}, DType::BF16);
  Tensor& score_grads = grown(score_grads_, cuda::attention_score_grad_elements(batch, seq_len, n_head), DType::F32);
  Tensor& scratch = grown(attention_scratch_, cuda::attention_scratch_elements(batch, seq_len, channels), DType::F32);
  cuda::attention_backward<float>(nullptr, score_grads.device_data<float>(), scratch.device_data<float>(),
                                  attention_bf16_scratch(qkv.dtype(), batch, seq_len, channels, n_head),
                                  ptr<float>(dout, op), ptr<float>(qkv, op), ptr<float>(state, op), batch, seq_len,
                                  channels, n_head, ctx_, copy.device_data<bf16>(), ptr<float>(dbias, op));
  return copy;
}

}  // namespace tripod::cuda
