// Which attention the CUDA backend runs for fp32 tensors under the bf16-operand policy:
// attention.cu's strided-batched GEMMs around a softmax (the default, measured on an H200 and an
// H100), or flash_attention.cu's tiles, which never hold the T x T scores
// (TRIPOD_CUDA_ATTENTION=flash; first run on an H100, 2026-12-05), or flash with its tiles kept
// in registers (flash-mma: flash_mma.cu, the same state; written 2026-12-06 without a GPU). Pure host code, so the rule is unit-tested without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "backend/backend.h"  // Fp32Matmul
#include "core/dtype.h"

namespace tripod::cuda {

enum class AttentionKernel { Gemm, Flash, FlashMma };

// Either flash attention (the same state, supported shapes and backward).
inline bool is_flash(AttentionKernel kernel) { return kernel != AttentionKernel::Gemm; }
// What a backend's name adds for it: "", ", flash attention", ", flash attention (mma tiles)".
const char* attention_name_suffix(AttentionKernel kernel);

// TRIPOD_CUDA_ATTENTION: "" (unset) or "gemm" -> Gemm, "flash" -> Flash, "flash-mma" -> FlashMma;
// anything else throws naming the variable and the values it takes. `env` returns a variable's
// value, "" when unset.
AttentionKernel choose_attention_kernel(const std::function<std::string(const char*)>& env);
AttentionKernel choose_attention_kernel();  // from the process's environment

// Shapes the flash kernels take on a device whose blocks may opt in to `shared_per_block_optin`
// bytes of shared memory: head size 16, 32, 64 or 128 (a tile product's inner dimension is a
// multiple of 16; one kernel is built for each) whose kernels' shared memory fits, and T >= hd + 1,
// so that the state they keep (the rows' logsumexp, B*H*T, and a copy of out, B*T*C) fits in the
// B*H*T*T probs buffer. Elsewhere the backend runs the GEMM attention. The shared memory is
// `kernel`'s: flash's block kernels need the opt-in (an A100's 163 KiB holds them all, a 99 KiB
// limit not head size 64's key-gradient kernel); flash-mma's own kernels take static shared memory
// under the 48 KiB every device gives, and only its backward at head size 128 (the block kernels')
// needs more, so an RTX 4090 or an L40 takes it at GPT-2's head size 64 where it cannot take flash.
bool flash_attention_supported(int64_t seq_len, int64_t channels, int64_t n_head, std::size_t shared_per_block_optin,
                               AttentionKernel kernel = AttentionKernel::Flash);
// Whether a backend set to `kernel` takes flash attention for a call: fp32 tensors under the
// bf16-operand policy, at a shape flash_attention_supported takes.
bool takes_flash_attention(AttentionKernel kernel, DType dtype, Fp32Matmul policy, int64_t seq_len, int64_t channels,
                           int64_t n_head, std::size_t shared_per_block_optin);
// Whether flash attention's backward under `kernel` runs flash-mma's register kernels (head sizes up
// to 64; they read bf16 copies of qkv and dout) rather than the block kernels (which read the fp32
// qkv and dout, so no copies are made for them).
bool flash_backward_in_registers(AttentionKernel kernel, int64_t channels, int64_t n_head);
// Whether such a backend's attention reads only the bf16 rounding of an fp32 qkv, forward and
// backward, so that the model may store qkv in bf16 (Backend::attention_input_dtype): flash-mma
// taken, at a head size its register backward takes (up to 64; above, the block kernels read fp32).
bool reads_bf16_qkv(AttentionKernel kernel, DType dtype, Fp32Matmul policy, int64_t seq_len, int64_t channels,
                    int64_t n_head, std::size_t shared_per_block_optin);
// Whether flash-mma's own kernels run a backend's attention over a qkv of `qkv_dtype`: a bf16 qkv
// (attention_input_dtype's, which only they read), or an fp32 one they take; `backward`: its register
// backward, at reads_bf16_qkv's head sizes (above, the block kernels run it). Where they do, the
// backend writes attention's bf16 operands from them (attention_operand, attention_backward_operand).
bool flash_mma_runs(AttentionKernel kernel, DType qkv_dtype, Fp32Matmul policy, int64_t seq_len, int64_t channels,
                    int64_t n_head, std::size_t shared_per_block_optin, bool backward);
// Why a backend set to a flash `kernel` runs the GEMM attention for these tensors after all ("" when
// it takes flash, or was not asked to): a sentence naming the variable's value, the reason (the
// dtype and policy, or the head size and T against what the kernels take) and what runs instead,
// for a run's start to print, so that a result recorded under a flash backend's name is not
// taken for flash's.
std::string flash_attention_declined(AttentionKernel kernel, DType dtype, Fp32Matmul policy, int64_t seq_len,
                                     int64_t channels, int64_t n_head, std::size_t shared_per_block_optin);
// The most shared memory a block of `kernel`'s kernels takes at this head size (0 if unsupported).
std::size_t flash_attention_shared_bytes(int64_t head_dim, AttentionKernel kernel = AttentionKernel::Flash);

}  // namespace tripod::cuda
