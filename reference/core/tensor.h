// Tensor: a typed, shaped view into reference-counted storage that lives on one device.
// Tensors never allocate by themselves; a Backend allocates storage on its device
// (host memory for the CPU backend, device memory for CUDA). Views share storage, so one
// flat parameter allocation can be cut into per-tensor views (as llm.c does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace tripod {

enum class Device { CPU, CUDA };

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[4, 64, 768]"

// Owns one allocation; `release` is supplied by the backend that made it.
struct Storage {
  void* data = nullptr;
  std::size_t bytes = 0;
  Device device = Device::CPU;
  std::function<void(void*)> release;
  Storage(void* data, std::size_t bytes, Device device, std::function<void(void*)> release);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, std::size_t offset_bytes, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::CPU; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int axis) const;
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  void* raw() const { return static_cast<char*>(storage_->data) + offset_bytes_; }
  template <typename T>
  T* data() const {
    // Every kernel call reads its tensors through here: build the message only on failure.
    if (dtype_ != dtype_of<T>()) fail("tensor of dtype ", dtype_name(dtype_), " read as ", dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // A view of `shape` starting `offset` elements into this tensor's (contiguous) data.
  Tensor view(int64_t offset, Shape shape) const;
  // The same elements with another shape of equal element count.
  Tensor reshape(Shape shape) const;
  // Row `i` along the first axis, e.g. layer i of a [L, ...] stack.
  Tensor operator[](int64_t i) const;

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace tripod
