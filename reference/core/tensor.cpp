#include "core/tensor.h"

#include <sstream>

namespace tripod {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::size_t allocation_bytes(const Shape& shape, DType dtype) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) fail("cannot allocate a tensor of shape ", shape_str(shape), ": negative dimension");
    overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes) || bytes > kLimit;
  }
  // The loop runs on after an overflow so that a negative dimension is still named as such.
  if (overflow) fail("cannot allocate a tensor of shape ", shape_str(shape), " of ", dtype_name(dtype),
                     ": more than 2^62 bytes (a product of sizes overflowed?)");
  return static_cast<std::size_t>(bytes);
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

Storage::Storage(void* data, std::size_t bytes, Device device, std::function<void(void*)> release)
    : data(data), bytes(bytes), device(device), release(std::move(release)) {}

Storage::~Storage() {
  if (release && data) release(data);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, std::size_t offset_bytes, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_bytes_(offset_bytes), shape_(std::move(shape)), dtype_(dtype) {
  // Tensors and views are made on every layer call: these checks build their messages only on failure.
  for (int64_t d : shape_)
    if (d < 0) fail("negative dimension in shape ", shape_str(shape_));
  if (storage_ && offset_bytes_ + bytes() > storage_->bytes) fail("tensor of shape ", shape_str(shape_),
        " at byte offset ", offset_bytes_, " does not fit its storage of ", storage_ ? storage_->bytes : 0,
        " bytes");
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return str_cat(dtype_name(dtype_), " ", shape_str(shape_), " on the ", device_name(device()));
}

void Tensor::refuse_host_access() const {
  fail("host access to a ", describe(), " tensor: its memory is not host memory. Read it through the backend ",
       "(download, to_host_f64) or compute on it with a backend operation");
}

void Tensor::wrong_dtype(DType asked, const char* op) const {
  fail(op != nullptr ? op : "", op != nullptr ? ": " : "", "tensor of dtype ", dtype_name(dtype_), " ",
       shape_str(shape_), " read as ", dtype_name(asked));
}

int64_t Tensor::dim(int axis) const {
  if (axis < 0) axis += rank();
  if (axis < 0 || axis >= rank()) fail("axis ", axis, " out of range for shape ", shape_str(shape_));
  return shape_[axis];
}

Tensor Tensor::view(int64_t offset, Shape shape) const {
  if (offset < 0 || offset + shape_numel(shape) > numel()) fail("view of ", shape_str(shape), " at offset ",
        offset, " exceeds tensor of shape ", shape_str(shape_));
  return Tensor(storage_, offset_bytes_ + static_cast<std::size_t>(offset) * dtype_size(dtype_),
                std::move(shape), dtype_);
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape_numel(shape) != numel()) fail("cannot reshape ", shape_str(shape_), " to ", shape_str(shape));
  return Tensor(storage_, offset_bytes_, std::move(shape), dtype_);
}

Tensor Tensor::operator[](int64_t i) const {
  if (rank() < 1 || i < 0 || i >= shape_[0]) fail("index ", i, " out of range for shape ", shape_str(shape_));
  Shape rest(shape_.begin() + 1, shape_.end());
  return view(i * shape_numel(rest), rest);
}

}  // namespace tripod
