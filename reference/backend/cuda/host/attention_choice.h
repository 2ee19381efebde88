// Which attention the CUDA backend runs for fp32 tensors under the bf16-operand policy:
// attention.cu's strided-batched GEMMs around a softmax (the default, measured on an H200), or
// flash_attention.cu's tiles, which never hold the T x T scores (TRIPOD_CUDA_ATTENTION=flash; not
// yet measured on a GPU). Pure host code, so the rule is unit-tested without a GPU.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace tripod::cuda {

enum class AttentionKernel { Gemm, Flash };

// TRIPOD_CUDA_ATTENTION: "" (unset) or "gemm" -> Gemm, "flash" -> Flash; anything else throws
// naming the variable and the values it takes. `env` returns a variable's value, "" when unset.
AttentionKernel choose_attention_kernel(const std::function<std::string(const char*)>& env);
AttentionKernel choose_attention_kernel();  // from the process's environment

// Shapes the flash kernels take: head size 16, 32, 64 or 128 (a tile product's inner dimension
// is a multiple of 16; one kernel is built for each), and T >= hd + 1, so that the state they keep
// (the rows' logsumexp, B*H*T, and a copy of out, B*T*C) fits in the B*H*T*T probs buffer.
bool flash_attention_supported(int64_t seq_len, int64_t channels, int64_t n_head);

}  // namespace tripod::cuda
