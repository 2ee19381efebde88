// The Hugging Face safetensors format, read and written on the host:
//   u64 little-endian header length N | N bytes of JSON header (space-padded to a multiple of 8) | data
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data, contiguous, in file order) plus an optional "__metadata__"
// object of string -> string. Tripod uses it for checkpoints, exports and the PyTorch cross-checks,
// so the files open in the Hugging Face tooling unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tripod::ckpt {

// The DType a C++ element type stores as: std::uint16_t carries the raw bits of BF16.
template <class T>
constexpr DType host_dtype_of() {
  if constexpr (std::is_same_v<T, std::uint16_t>) {
    return DType::BF16;
  } else {
    return dtype_of<T>();
  }
}

// One named tensor held in host memory as raw little-endian bytes (the on-disk encoding), so any
// dtype (bf16 included) round-trips without conversion.
struct HostTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;  // {} is a 0-d scalar (one element); a 0 anywhere makes an empty tensor
  std::vector<std::byte> data;

  int64_t numel() const { return shape_numel(shape); }

  // Typed access; T must match the dtype (std::uint16_t for the raw bits of BF16).
  template <class T>
  const T* as() const {
    check_type<T>();
    return reinterpret_cast<const T*>(data.data());
  }
  template <class T>
  T* as() {
    check_type<T>();
    return reinterpret_cast<T*>(data.data());
  }

 private:
  template <class T>
  void check_type() const {
    const DType wanted = host_dtype_of<T>();
    check(dtype == wanted, "tensor '", name, "' of dtype ", dtype_name(dtype), " read as ",
          dtype_name(wanted));
    TRIPOD_CHECK(data.size() == static_cast<std::size_t>(numel()) * dtype_size(dtype), "tensor '", name, "' holds ",
                 data.size(), " bytes but its shape ", shape_str(shape), " needs ",
                 numel() * static_cast<int64_t>(dtype_size(dtype)));
  }
};

// Builds a HostTensor by copying `values` (float, double, int32_t; std::uint16_t for the raw bits of BF16).
template <class T>
HostTensor make_host_tensor(std::string name, Shape shape, std::span<const T> values) {
  constexpr DType dtype = host_dtype_of<T>();
  static_assert(dtype_size(dtype) == sizeof(T));
  for (int64_t d : shape) TRIPOD_CHECK(d >= 0, "tensor '", name, "' has a negative dimension in ", shape_str(shape));
  TRIPOD_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "tensor '", name, "' has shape ",
               shape_str(shape), " but ", values.size(), " values were given");
  HostTensor t{std::move(name), dtype, std::move(shape), std::vector<std::byte>(values.size_bytes())};
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), values.size_bytes());
  return t;
}
template <class T>
HostTensor make_host_tensor(std::string name, Shape shape, const std::vector<T>& values) {
  return make_host_tensor<T>(std::move(name), std::move(shape), std::span<const T>(values));
}

// Writes `path.tmp`, fsyncs it, then renames it over `path` (and fsyncs the directory), so a crash
// never leaves a half-written file under the real name. Tensors are stored in the given order.
// Throws tripod::Error (naming the path and tensor) on duplicate names, a data size that does not
// match shape x dtype, or any I/O failure.
void write_safetensors(const std::filesystem::path& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A whole safetensors file read into host memory and validated: every malformed or truncated file
// is a tripod::Error naming the path (and the tensor, where one is at fault).
class SafetensorsFile {
 public:
  static SafetensorsFile read(const std::filesystem::path& path);
  // The same validation of a whole file's bytes already in memory, named `origin` in errors (the
  // fuzz suite's entry point; read() streams the tensor data from the file instead).
  static SafetensorsFile parse(std::span<const std::byte> bytes, const std::filesystem::path& origin);

  const HostTensor& get(const std::string& name) const;  // throws, naming file and tensor, if absent
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const std::vector<HostTensor>& tensors() const { return tensors_; }  // in file (data offset) order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void add(HostTensor tensor);

  std::filesystem::path path_;
  std::vector<HostTensor> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype string ("F32", "F64", "BF16", "I32") of a DType, and back; parsing an
// unsupported string throws, listing the supported ones.
std::string safetensors_dtype_name(DType dtype);
DType parse_safetensors_dtype(const std::string& name);

}  // namespace tripod::ckpt
