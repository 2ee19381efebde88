#include "backend/cuda/cuda_check.h"

#include "core/error.h"

namespace tripod::cuda {
namespace {

// cuBLASLt shares cuBLAS's status codes, but their names live in libcublas, which the backend
// does not otherwise need: name them here.
const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (no usable device or driver)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED (out of memory)";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (an unsupported argument or layout)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH (the device lacks a needed feature)";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED (a kernel failed to run)";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED (no kernel for this combination)";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "an unknown cuBLAS status";
  }
}

}  // namespace

const char* cuda_error_hint(cudaError_t status) {
  switch (status) {
    // A kernel's fault is sticky: the context is lost and every later CUDA call, on any stream,
    // returns it, so the call that reports it is often not the one that caused it.
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
      return "; a kernel fault is reported by whichever CUDA call comes next, so it may come from an earlier "
             "kernel: rerun with CUDA_LAUNCH_BLOCKING=1 (or under compute-sanitizer) to name it";
    default: return "";
  }
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    fail("CUDA error in ", what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")",
         cuda_error_hint(status));
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS error in ", what, ": ", cublas_status_name(status), " (status ", static_cast<int>(status), ")");
}

}  // namespace tripod::cuda
