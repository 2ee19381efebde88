// Tensor: a typed, shaped view into reference-counted storage that lives on one device.
// Tensors never allocate by themselves; a Backend allocates storage on its device (host memory for
// the CPU backend, "device" memory for the emulated-device and CUDA backends), and
// core/host_memory.h makes plain host tensors. Views share storage, so one flat parameter
// allocation can be cut into per-tensor views (as llm.c does).
//
// Who may touch the bytes: data<T>() and raw() give host code a pointer and refuse any tensor that
// does not live in host memory, naming it. Backends (and communicators that move a device's memory
// themselves) reach their own device's memory through device_data<T>() / device_raw(), which only
// check the dtype. address() is for identity and overlap tests, never for dereferencing.
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

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
// The bytes of a new tensor of this shape and dtype, for allocators: a negative dimension, or a size
// past 2^62 bytes (an overflowed batch x sequence product, say), is an Error naming the shape.
std::size_t allocation_bytes(const Shape& shape, DType dtype);
std::string shape_str(const Shape& shape);  // "[4, 64, 768]"

// Owns one allocation; `release` is supplied by whoever made it (null: not owned, a view of memory
// that someone else keeps alive).
struct Storage {
  void* data = nullptr;
  std::size_t bytes = 0;
  Device device = Device::Host;
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
  Device device() const { return storage_ ? storage_->device : Device::Host; }
  bool on_host() const { return device() == Device::Host; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int axis) const;
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  // "fp32 [4, 64] on the emulated device", for error messages.
  std::string describe() const;

  // ---- host access (host memory only) ----
  void* raw() const {
    if (!on_host()) refuse_host_access();
    return device_raw();
  }
  template <typename T>
  T* data() const {
    // Host loops read their tensors through here: build the messages only on failure.
    if (dtype_ != dtype_of<T>()) wrong_dtype(dtype_of<T>());
    if (!on_host()) refuse_host_access();
    return static_cast<T*>(device_raw());
  }

  // ---- backend access (the tensor's own memory space, wherever it is) ----
  void* device_raw() const { return static_cast<char*>(storage_->data) + offset_bytes_; }
  // `op` (null for none) names the operation in the error a wrong dtype raises.
  template <typename T>
  T* device_data(const char* op = nullptr) const {
    if (dtype_ != dtype_of<T>()) wrong_dtype(dtype_of<T>(), op);
    return static_cast<T*>(device_raw());
  }

  // Where the first element is, to compare tensors (same memory? overlapping?); not to dereference.
  const void* address() const { return storage_ ? device_raw() : nullptr; }

  // A view of `shape` starting `offset` elements into this tensor's (contiguous) data.
  Tensor view(int64_t offset, Shape shape) const;
  // The same elements with another shape of equal element count.
  Tensor reshape(Shape shape) const;
  // Row `i` along the first axis, e.g. layer i of a [L, ...] stack.
  Tensor operator[](int64_t i) const;

 private:
  [[noreturn]] void refuse_host_access() const;
  [[noreturn]] void wrong_dtype(DType asked, const char* op = nullptr) const;

  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace tripod
