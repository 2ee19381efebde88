// Device memory for a kernel's partial results, ordered on one stream: taken with cudaMallocAsync
// and given back with cudaFreeAsync on the same stream when the object goes (after the kernels
// issued before it), so a launch that throws in between does not leak it.
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/stream_alloc.h"

namespace tripod::cuda {

class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream, const char* what) : stream_(stream) {
    // As the backend's tensors are allocated: the pool's free pieces go back before a failure.
    check_cuda(malloc_async_or_trim(&ptr_, bytes, stream), what);
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
