// Element types and the devices their memory lives on. fp32 and fp64 run every kernel; bf16 is a
// storage and GEMM-input type (summed in fp32); int32 holds token ids and targets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tripod {

enum class DType { F32, F64, BF16, I32 };  // I32: token ids and targets

// bfloat16 as stored: the upper 16 bits of an IEEE fp32 (core/bf16.h converts).
struct bf16 {
  uint16_t bits = 0;
};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I32: return 4;
  }
  return 0;
}

std::string dtype_name(DType t);      // "fp32", "fp64", "bf16", "int32"
DType parse_dtype(const std::string& name);  // throws tripod::Error on an unknown name

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }

// Where a tensor's memory lives. Only Host memory may be read or written by code outside a
// backend; Emulated is host memory that the emulated-device backend owns and treats as a device's
// (so that every stray host access is caught on a machine without a GPU); Cuda is GPU memory.
enum class Device { Host, Emulated, Cuda };
std::string device_name(Device device);  // "host", "emulated device", "cuda"

}  // namespace tripod
