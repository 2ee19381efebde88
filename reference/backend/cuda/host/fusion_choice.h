// Which of the CUDA backend's fused forms run. Each has an unfused form in Backend (the same
// operations as separate passes, what the CPU and the emulated device run), so turning one off
// changes no result beyond fp32 rounding: TRIPOD_CUDA_FUSIONS lets one GPU run time the training
// step with and without them (gpu-check's bench-train step), and lets a fused kernel that fails on
// a device be stepped around while everything else is measured. Pure host code, unit-tested here.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace tripod::cuda {

enum class CudaFusion : uint32_t {
  BiasEpilogue,      // "bias": the bias in cuBLASLt's epilogue (gemm_bias)
  ResidualEpilogue,  // "residual": the residual as cuBLASLt's C (gemm_bias_residual)
  BiasGradCopy,      // "bias-grad": an output gradient's bf16 copy and its bias gradient in one pass
  OperandProducers,  // "operands": gelu(fc), d fc, ln(x) and the loss gradient written as bf16 operands
  LossStats,         // "loss-stats": the loss's row max and sum of exponentials in one pass (logits_stats)
  LayernormGrads,    // "layernorm-grads": LayerNorm's weight and bias gradients summed in dinp's pass
  Bf16Qkv,           // "qkv-bf16": qkv stored as bf16 where flash-mma reads only that, from c_attn's epilogue
  LossGradient,      // "loss-gradient": the loss and its gradient in one kernel (cross_entropy_with_gradient)
};
inline constexpr int kCudaFusionCount = 8;

struct CudaFusions {
  uint32_t mask = (1u << kCudaFusionCount) - 1;  // every one on
  bool on(CudaFusion f) const { return (mask >> static_cast<uint32_t>(f)) & 1u; }
  bool all() const { return mask == (1u << kCudaFusionCount) - 1; }
  // "all", "none", or the names of those on, comma-separated, in the enum's order.
  std::string describe() const;
};

// The name TRIPOD_CUDA_FUSIONS uses for a fusion ("bias", "residual", ...).
const char* fusion_name(CudaFusion f);

// TRIPOD_CUDA_FUSIONS: "" (unset) or "all" -> every fusion; "none" -> none; else the fusions to
// keep, comma-separated names (e.g. "bias,residual"). An unknown or empty name throws, naming the
// variable and the names it takes. `env` returns a variable's value, "" when unset.
CudaFusions choose_cuda_fusions(const std::function<std::string(const char*)>& env);
CudaFusions choose_cuda_fusions();  // from the process's environment

}  // namespace tripod::cuda
