// What every CUDA kernel launcher and the GEMM need from the backend: the stream all work is
// issued on (so it is ordered without extra synchronisation), the device's limits, the cuBLASLt
// handle with its workspace.
#pragma once
#include <cstddef>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/host/launch_geometry.h"

namespace tripod::cuda {

struct CudaContext {
  int device = 0;  // the ordinal the stream and handle belong to
  cudaStream_t stream = nullptr;
  DeviceLimits limits;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // device memory for cuBLASLt
  std::size_t workspace_bytes = 0;
};

}  // namespace tripod::cuda
