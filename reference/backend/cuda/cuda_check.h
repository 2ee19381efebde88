// Every CUDA runtime and cuBLAS call is checked; a failure throws tripod::Error naming the call.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

namespace tripod::cuda {

void check_cuda(cudaError_t status, const char* what);
// "" or, for a sticky kernel fault (an illegal address, ...), a sentence saying that the call that
// reports it may not be the one that caused it and how to find that one.
const char* cuda_error_hint(cudaError_t status);
void check_cublas(cublasStatus_t status, const char* what);
// After a kernel launch: a bad configuration shows here, not at the next synchronisation.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace tripod::cuda
