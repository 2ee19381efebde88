// Stream-ordered device allocation that gives the memory pool's free pieces back before it fails:
// a pool keeps freed memory (the backend sets no release threshold), and its pieces may not fit a
// request that the device could serve once they are returned.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

namespace tripod::cuda {

// cudaMallocAsync on `stream` from its device's current pool; where it fails, waits for the stream,
// trims the pool to what is in use and tries once more. Returns the last status; a failure's error
// state is cleared (not sticky: it must not resurface at the next launch).
cudaError_t malloc_async_or_trim(void** ptr, std::size_t bytes, cudaStream_t stream);

}  // namespace tripod::cuda
