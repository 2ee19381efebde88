#include "core/host_memory.h"

#include <fstream>
#include <string>

#include "core/block_cache.h"


namespace tripod {

Tensor host_alloc(const Shape& shape, DType dtype) {
  const std::size_t bytes = allocation_bytes(shape, dtype);
  const std::size_t padded = (bytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of the alignment
  void* ptr = allocate_host_block(padded);  // large ones cached: core/block_cache.h says why not malloc
  TRIPOD_CHECK(padded == 0 || ptr != nullptr, "out of host memory allocating ", bytes, " bytes for a tensor of shape ",
               shape_str(shape));
  auto release = [padded](void* p) { free_host_block(p, padded); };
  return Tensor(std::make_shared<Storage>(ptr, bytes, Device::Host, release), 0, shape, dtype);
}

int64_t host_memory_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string name; meminfo >> name;) {
    int64_t kib = 0;
    if (!(meminfo >> kib)) break;
    if (name == "MemAvailable:") return kib * 1024;
    meminfo.ignore(64, '\n');
  }
  return -1;
}

Tensor host_view(void* data, const Shape& shape, DType dtype) {
  const std::size_t bytes = allocation_bytes(shape, dtype);
  return Tensor(std::make_shared<Storage>(data, bytes, Device::Host, nullptr), 0, shape, dtype);
}

}  // namespace tripod
