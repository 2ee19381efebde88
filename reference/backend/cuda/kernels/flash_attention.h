// Causal attention without the T x T probabilities (flash_attention.cu; the algorithm and its host
// replay: backend/kernels/flash_attention_block.h), for fp32 tensors under the bf16-operand policy:
// q, k, v, dout, the probabilities and the score gradients are bf16 on the tensor cores, the
// softmax, its statistics and every sum fp32. The CUDA backend uses it when asked
// (TRIPOD_CUDA_ATTENTION=flash) and the shape is supported; otherwise attention.cu's GEMMs.
//
// State kept from forward to backward, in the caller's state buffer ("probs": the model allocates
// what Backend::attention_state_shape says, B*H*T + B*T*C; a [B,H,T,T] buffer also holds it when
// T >= hd + 1, which host/attention_choice.h's flash_attention_supported asks):
// the rows' logsumexp [B*H*T], then a copy of out [B*T*C] for the backward's
// delta = rowsum(bf16(dout) * out).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_context.h"
#include "backend/cuda/host/attention_choice.h"
#include "backend/kernels/flash_backward_warp.h"  // flash_mma::OperandOut
#include "core/dtype.h"

namespace tripod::cuda {

void flash_attention_forward(float* out, float* state, const float* qkv, int64_t batch, int64_t seq_len,
                             int64_t channels, int64_t n_head, const CudaContext& ctx);
// The same outputs and state from the forward whose tiles stay in registers (flash_mma.cu,
// backend/kernels/flash_forward_warp.h; TRIPOD_CUDA_ATTENTION=flash-mma). `copies`: scratch of
// flash_mma_copy_elements(..., false) bf16, 16-byte aligned, for the copy of qkv its kernel reads.
// Where the model stores qkv in bf16 (Backend::attention_input_dtype), `qkv16` is it (16-byte
// aligned), read as it is: qkv and copies may then be null. `out16` (4-byte aligned, [B, T, C]):
// out's bf16 rounding, written in out's place where out is null (the attention's GEMM operand,
// Backend::attention_operand; the state keeps its own fp32 copy of out).
void flash_attention_forward_mma(float* out, float* state, const float* qkv, bf16* copies, int64_t batch,
                                 int64_t seq_len, int64_t channels, int64_t n_head, const CudaContext& ctx,
                                 const bf16* qkv16 = nullptr, bf16* out16 = nullptr);
// flash_attention_backward's register kernels, delta computed (flash_mma.cu); `copies` as above,
// of flash_mma_copy_elements(..., true, qkv16 != nullptr, dout16 != nullptr), for the copies of
// qkv (unless qkv16 is given) and dout (unless dout16 is).
// `operand` given: dqkv written as c_attn's bf16 operand with the bias gradient's partial sums
// (flash_backward_warp.h's store_operand_rows), dqkv null.
void flash_backward_mma_kernels(float* dqkv, const float* delta, const float* dout, const float* qkv,
                                const float* lse, bf16* copies, int64_t batch, int64_t seq_len, int64_t channels,
                                int64_t n_head, const CudaContext& ctx, const bf16* qkv16 = nullptr,
                                const bf16* dout16 = nullptr, kernels::flash_mma::OperandOut operand = {});
// Overwrites dqkv. `delta`: scratch of flash_attention_delta_elements floats. `kernel` FlashMma
// (TRIPOD_CUDA_ATTENTION=flash-mma): flash_mma.cu's kernels (backend/kernels/flash_backward_warp.h)
// at head sizes up to 64, reading copies made in `register_copies` (scratch as the forward's);
// above 64, or Flash, the block kernels above. `qkv16`: a bf16 qkv read as it is (FlashMma at head
// sizes up to 64 only; qkv may then be null), as flash_attention_forward_mma's; `dout16` likewise
// the model's bf16 output gradient (dout may then be null): the bits of its fp32 value, whose
// bf16 rounding is all that delta and the kernels read of it. `operand` (the register backward
// only): dqkv written as c_attn's bf16 operand and the bias gradient's partial sums, dqkv null.
void flash_attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv, const float* state,
                              int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head,
                              const CudaContext& ctx, AttentionKernel kernel = AttentionKernel::Flash,
                              bf16* register_copies = nullptr, const bf16* qkv16 = nullptr,
                              const bf16* dout16 = nullptr, kernels::flash_mma::OperandOut operand = {});
inline int64_t flash_attention_delta_elements(int64_t batch, int64_t seq_len, int64_t n_head) {
  return batch * n_head * seq_len;
}
// The register kernels' bf16 copies: qkv [B, T, 3C] (none where the model's qkv is bf16 already),
// then (the backward's) dout [B, T, C] (none where the model's is).
inline int64_t flash_mma_copy_elements(int64_t batch, int64_t seq_len, int64_t channels, bool backward,
                                       bool qkv_given = false, bool dout_given = false) {
  return batch * seq_len * ((qkv_given ? 0 : 3) + (backward && !dout_given ? 1 : 0)) * channels;
}

}  // namespace tripod::cuda
