#include "backend/cuda/host/attention_choice.h"

#include <algorithm>

#include "backend/cuda/host/process_env.h"
#include "backend/kernels/flash_attention_backward.h"
#include "backend/kernels/flash_attention_block.h"
#include "backend/kernels/flash_backward_warp.h"
#include "backend/kernels/flash_forward_warp.h"
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

namespace {

template <int HD>
std::size_t block_kernels_bytes() {  // the key-gradient kernel's is the largest of the three
  static_assert(sizeof(kernels::flash::ForwardShared<HD>) <= sizeof(kernels::flash::KeyGradsShared<HD>));
  return sizeof(kernels::flash::KeyGradsShared<HD>);
}

template <int HD>
std::size_t register_kernels_bytes() {  // flash-mma: its forward, and its backward up to head size 64
  namespace fm = kernels::flash_mma;
  std::size_t bytes = sizeof(fm::Shared<HD>);
  if constexpr (HD <= 64) {
    bytes = std::max({bytes, sizeof(fm::KeyGradsShared<HD>), sizeof(fm::QueryGradsShared<HD>)});
  } else {
    bytes = std::max(bytes, block_kernels_bytes<HD>());
  }
  return bytes;
}

template <int HD>
std::size_t kernels_bytes(AttentionKernel kernel) {
  return kernel == AttentionKernel::FlashMma ? register_kernels_bytes<HD>() : block_kernels_bytes<HD>();
}

}  // namespace

std::size_t flash_attention_shared_bytes(int64_t head_dim, AttentionKernel kernel) {
  switch (head_dim) {
    case 16: return kernels_bytes<16>(kernel);
    case 32: return kernels_bytes<32>(kernel);
    case 64: return kernels_bytes<64>(kernel);
    case 128: return kernels_bytes<128>(kernel);
    default: return 0;
  }
}

bool flash_attention_supported(int64_t seq_len, int64_t channels, int64_t n_head, std::size_t shared_per_block_optin,
                               AttentionKernel kernel) {
  if (n_head <= 0 || channels % n_head != 0) return false;
  const int64_t head_dim = channels / n_head;
  return kernels::flash::supported_head_dim(head_dim) && seq_len >= head_dim + 1 &&
         flash_attention_shared_bytes(head_dim, kernel) <= shared_per_block_optin;
}

bool takes_flash_attention(AttentionKernel kernel, DType dtype, Fp32Matmul policy, int64_t seq_len, int64_t channels,
                           int64_t n_head, std::size_t shared_per_block_optin) {
  return is_flash(kernel) && dtype == DType::F32 && policy == Fp32Matmul::Bf16Operands &&
         flash_attention_supported(seq_len, channels, n_head, shared_per_block_optin, kernel);
}

bool flash_backward_in_registers(AttentionKernel kernel, int64_t channels, int64_t n_head) {
  return kernel == AttentionKernel::FlashMma && n_head > 0 &&
         kernels::flash_mma::register_backward_head_dim(channels / n_head);
}

bool reads_bf16_qkv(AttentionKernel kernel, DType dtype, Fp32Matmul policy, int64_t seq_len, int64_t channels,
                    int64_t n_head, std::size_t shared_per_block_optin) {
  return takes_flash_attention(kernel, dtype, policy, seq_len, channels, n_head, shared_per_block_optin) &&
         flash_backward_in_registers(kernel, channels, n_head);
}

bool flash_mma_runs(AttentionKernel kernel, DType qkv_dtype, Fp32Matmul policy, int64_t seq_len, int64_t channels,
                    int64_t n_head, std::size_t shared_per_block_optin, bool backward) {
  if (qkv_dtype == DType::BF16) return true;
  if (backward) return reads_bf16_qkv(kernel, qkv_dtype, policy, seq_len, channels, n_head, shared_per_block_optin);
  return kernel == AttentionKernel::FlashMma &&
         takes_flash_attention(kernel, qkv_dtype, policy, seq_len, channels, n_head, shared_per_block_optin);
}

std::string flash_attention_declined(AttentionKernel kernel, DType dtype, Fp32Matmul policy, int64_t seq_len,
                                     int64_t channels, int64_t n_head, std::size_t shared_per_block_optin) {
  if (takes_flash_attention(kernel, dtype, policy, seq_len, channels, n_head, shared_per_block_optin) ||
      !is_flash(kernel))
    return "";
  const std::string asked =
      std::string("TRIPOD_CUDA_ATTENTION=") + (kernel == AttentionKernel::FlashMma ? "flash-mma" : "flash");
  const std::string instead = ": the GEMM attention runs instead";
  if (dtype != DType::F32 || policy != Fp32Matmul::Bf16Operands)
    return asked + " takes fp32 tensors under bf16-mixed only (this run: " + dtype_name(dtype) +
           (policy == Fp32Matmul::Bf16Operands ? ", bf16-mixed" : ", not bf16-mixed") + ")" + instead;
  const int64_t head_dim = n_head > 0 && channels % n_head == 0 ? channels / n_head : 0;
  return asked + " does not take head size " + std::to_string(head_dim) + " at T = " + std::to_string(seq_len) +
         " (it takes head size 16, 32, 64 or 128 whose kernels fit the device's " +
         std::to_string(shared_per_block_optin / 1024) + " KiB of shared memory a block, and T > head size)" +
         instead;
}

}  // namespace tripod::cuda
