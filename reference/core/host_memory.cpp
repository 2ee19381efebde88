#include "core/host_memory.h"

#include "core/block_cache.h"

#include <cstdlib>
#include <cstring>

namespace tripod {

Tensor host_alloc(const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  const std::size_t padded = (bytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of the alignment
  const bool cached = padded >= kCachedBlockMinBytes;  // large: core/block_cache.h says why not malloc
  void* ptr = cached ? host_block_cache().allocate(padded) : padded ? std::aligned_alloc(64, padded) : nullptr;
  check(padded == 0 || ptr != nullptr, "out of host memory allocating ", bytes, " bytes for a tensor of shape ",
        shape_str(shape));
  if (ptr && !cached) std::memset(ptr, 0, padded);  // the cache's blocks come zero-filled
  auto release = [padded, cached](void* p) {
    if (cached) host_block_cache().release(p, padded);
    else std::free(p);
  };
  return Tensor(std::make_shared<Storage>(ptr, bytes, Device::Host, release), 0, shape, dtype);
}

Tensor host_view(void* data, const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(data, bytes, Device::Host, nullptr), 0, shape, dtype);
}

}  // namespace tripod
