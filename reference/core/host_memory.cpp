#include "core/host_memory.h"

#include <cstdlib>
#include <cstring>

namespace tripod {

Tensor host_alloc(const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  const std::size_t padded = (bytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of the alignment
  void* ptr = padded ? std::aligned_alloc(64, padded) : nullptr;
  check(padded == 0 || ptr != nullptr, "out of host memory allocating ", bytes, " bytes for a tensor of shape ",
        shape_str(shape));
  if (ptr) std::memset(ptr, 0, padded);
  return Tensor(std::make_shared<Storage>(ptr, bytes, Device::Host, [](void* p) { std::free(p); }), 0, shape, dtype);
}

Tensor host_view(void* data, const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(data, bytes, Device::Host, nullptr), 0, shape, dtype);
}

}  // namespace tripod
