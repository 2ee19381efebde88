// What every CUDA kernel launcher and the GEMM need from the backend: the stream all work is
// issued on (so it is ordered without extra synchronisation), the device's limits, the cuBLASLt
// handle with its workspace, and whether fp32 GEMMs may use TF32 (off unless asked for).
#pragma once
#include <cstddef>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/host/launch_geometry.h"

namespace tripod::cuda {

struct CudaContext {
  cudaStream_t stream = nullptr;
  DeviceLimits limits;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // device memory for cuBLASLt
  std::size_t workspace_bytes = 0;
  bool allow_tf32 = false;  // fp32 GEMMs on TF32 tensor cores: only under Fp32Matmul::Tf32Operands
};

}  // namespace tripod::cuda
