#include "backend/cuda/stream_alloc.h"

namespace tripod::cuda {

cudaError_t malloc_async_or_trim(void** ptr, std::size_t bytes, cudaStream_t stream) {
  cudaError_t status = cudaMallocAsync(ptr, bytes, stream);
  if (status == cudaSuccess) return status;
  (void)cudaGetLastError();
  // Pieces freed on the stream return to the pool only as the stream reaches their frees.
  if (const cudaError_t synced = cudaStreamSynchronize(stream); synced != cudaSuccess) return synced;
  // The pool cudaMallocAsync draws from is the stream's device's, which need not be the calling
  // thread's current device (cudaGetDevice's).
  int device = 0;
  cudaMemPool_t pool = nullptr;
  if (cudaStreamGetDevice(stream, &device) == cudaSuccess && cudaDeviceGetMemPool(&pool, device) == cudaSuccess)
    (void)cudaMemPoolTrimTo(pool, 0);
  status = cudaMallocAsync(ptr, bytes, stream);
  if (status != cudaSuccess) (void)cudaGetLastError();
  return status;
}

}  // namespace tripod::cuda
