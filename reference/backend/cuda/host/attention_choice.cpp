#include "backend/cuda/host/attention_choice.h"

#include <cstdlib>

#include "backend/kernels/flash_attention_block.h"
#include "core/error.h"

namespace tripod::cuda {

AttentionKernel choose_attention_kernel(const std::function<std::string(const char*)>& env) {
  const std::string value = env("TRIPOD_CUDA_ATTENTION");
  if (value.empty() || value == "gemm") return AttentionKernel::Gemm;
  if (value == "flash") return AttentionKernel::Flash;
  throw Error("TRIPOD_CUDA_ATTENTION=" + value + ": expected gemm (the default) or flash");
}

AttentionKernel choose_attention_kernel() {
  return choose_attention_kernel([](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value == nullptr ? "" : value);
  });
}

bool flash_attention_supported(int64_t seq_len, int64_t channels, int64_t n_head) {
  if (n_head <= 0 || channels % n_head != 0) return false;
  const int64_t head_dim = channels / n_head;
  return kernels::flash::supported_head_dim(head_dim) && seq_len >= head_dim + 1;
}

}  // namespace tripod::cuda
