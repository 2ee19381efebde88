// Device memory for a kernel's partial results, ordered on one stream: taken with cudaMallocAsync
// and given back with cudaFreeAsync on the same stream when the object goes (after the kernels
// issued before it), so a launch that throws in between does not leak it.
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_check.h"

namespace tripod::cuda {

class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream, const char* what) : stream_(stream) {
    const cudaError_t status = cudaMallocAsync(&ptr_, bytes, stream);
    if (status != cudaSuccess) (void)cudaGetLastError();  // not sticky: must not resurface at the next launch
    check_cuda(status, what);
  }
  ~StreamScratch() { (void)cudaFreeAsync(ptr_, stream_); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace tripod::cuda
