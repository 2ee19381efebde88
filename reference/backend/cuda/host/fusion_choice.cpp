#include "backend/cuda/host/fusion_choice.h"

#include <algorithm>

#include "backend/cuda/host/process_env.h"
#include "core/error.h"

namespace tripod::cuda {

const char* fusion_name(CudaFusion f) {
  switch (f) {
    case CudaFusion::BiasEpilogue: return "bias";
    case CudaFusion::ResidualEpilogue: return "residual";
    case CudaFusion::BiasGradCopy: return "bias-grad";
    case CudaFusion::OperandProducers: return "operands";
    case CudaFusion::LossStats: return "loss-stats";
    case CudaFusion::LayernormGrads: return "layernorm-grads";
    case CudaFusion::Bf16Qkv: return "qkv-bf16";
    case CudaFusion::LossGradient: return "loss-gradient";
  }
  return "?";
}

std::string CudaFusions::describe() const {
  if (all()) return "all";
  std::string names;
  for (int i = 0; i < kCudaFusionCount; ++i) {
    const auto f = static_cast<CudaFusion>(i);
    if (!on(f)) continue;
    if (!names.empty()) names += ',';
    names += fusion_name(f);
  }
  return names.empty() ? "none" : names;
}

namespace {

std::string known_names() {
  std::string names;
  for (int i = 0; i < kCudaFusionCount; ++i) names += std::string(i ? ", " : "") + fusion_name(static_cast<CudaFusion>(i));
  return names;
}

}  // namespace

CudaFusions choose_cuda_fusions(const std::function<std::string(const char*)>& env) {
  const std::string value = env("TRIPOD_CUDA_FUSIONS");
  CudaFusions fusions;
  if (value.empty() || value == "all") return fusions;
  fusions.mask = 0;
  if (value == "none") return fusions;
  std::size_t start = 0;
  while (start <= value.size()) {
    const std::size_t end = std::min(value.find(',', start), value.size());
    const std::string name = value.substr(start, end - start);
    int found = -1;
    for (int i = 0; i < kCudaFusionCount; ++i)
      if (name == fusion_name(static_cast<CudaFusion>(i))) found = i;
    check(found >= 0, "TRIPOD_CUDA_FUSIONS=", value, ": '", name, "' is not a fusion; expected all (the default), ",
          "none, or a comma-separated list of those to keep: ", known_names());
    fusions.mask |= 1u << static_cast<uint32_t>(found);
    start = end + 1;
  }
  return fusions;
}

CudaFusions choose_cuda_fusions() {
  return choose_cuda_fusions(process_env);
}

}  // namespace tripod::cuda
