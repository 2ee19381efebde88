// Plain host tensors, for what lives on the host whatever the backend: token ids before upload,
// per-rank reports, timings and flags exchanged through a communicator, values read back from a
// device. Code that fills or reads a tensor with a loop uses one of these, never a backend's
// allocation (which may be device memory).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace tripod {

// MemAvailable of /proc/meminfo in bytes (what can be allocated without swapping); -1 unknown.
int64_t host_memory_available_bytes();

// Zero-filled, 64-byte aligned host memory owned by the tensor.
Tensor host_alloc(const Shape& shape, DType dtype);

// A host tensor over memory someone else owns and keeps alive (a std::vector, say).
Tensor host_view(void* data, const Shape& shape, DType dtype);
inline Tensor host_view(std::vector<double>& v) {
  return host_view(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::F64);
}
inline Tensor host_view(const std::vector<double>& v) {  // for sending only
  return host_view(const_cast<double*>(v.data()), Shape{static_cast<int64_t>(v.size())}, DType::F64);
}

}  // namespace tripod
