#include "backend/cuda/host/attention_choice.h"

#include "backend/cuda/host/process_env.h"
#include "backend/kernels/flash_attention_backward.h"
#include "backend/kernels/flash_attention_block.h"
#include "core/error.h"

namespace tripod::cuda {

AttentionKernel choose_attention_kernel(const std::function<std::string(const char*)>& env) {
  const std::string value = env("TRIPOD_CUDA_ATTENTION");
  if (value.empty() || value == "gemm") return AttentionKernel::Gemm;
  if (value == "flash") return AttentionKernel::Flash;
  if (value == "flash-mma") return AttentionKernel::FlashMma;
  throw Error("TRIPOD_CUDA_ATTENTION=" + value + ": expected gemm (the default), flash or flash-mma");
}

const char* attention_name_suffix(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Flash: return ", flash attention";
    case AttentionKernel::FlashMma: return ", flash attention (mma tiles)";
    default: return "";
  }
}

AttentionKernel choose_attention_kernel() {
  return choose_attention_kernel(process_env);
}

std::size_t flash_attention_shared_bytes(int64_t head_dim) {
  using namespace kernels::flash;
  switch (head_dim) {  // the key-gradient kernel's is the largest of the three
    case 16: return sizeof(KeyGradsShared<16>);
    case 32: return sizeof(KeyGradsShared<32>);
    case 64: return sizeof(KeyGradsShared<64>);
    case 128: return sizeof(KeyGradsShared<128>);
    default: return 0;
  }
}

bool flash_attention_supported(int64_t seq_len, int64_t channels, int64_t n_head, std::size_t shared_per_block_optin) {
  if (n_head <= 0 || channels % n_head != 0) return false;
  const int64_t head_dim = channels / n_head;
  static_assert(sizeof(kernels::flash::ForwardShared<128>) <= sizeof(kernels::flash::KeyGradsShared<128>));
  return kernels::flash::supported_head_dim(head_dim) && seq_len >= head_dim + 1 &&
         flash_attention_shared_bytes(head_dim) <= shared_per_block_optin;
}

bool takes_flash_attention(AttentionKernel kernel, DType dtype, Fp32Matmul policy, int64_t seq_len, int64_t channels,
                           int64_t n_head, std::size_t shared_per_block_optin) {
  return is_flash(kernel) && dtype == DType::F32 && policy == Fp32Matmul::Bf16Operands &&
         flash_attention_supported(seq_len, channels, n_head, shared_per_block_optin);
}

}  // namespace tripod::cuda
