// Element types. fp32 and fp64 run on the CPU backend; bf16 is reserved for the CUDA backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tripod {

enum class DType { F32, F64, BF16, I32 };  // I32: token ids and targets

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I32: return 4;
  }
  return 0;
}

std::string dtype_name(DType t);      // "fp32", "fp64", "bf16"
DType parse_dtype(const std::string& name);  // throws tripod::Error on an unknown name

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }

}  // namespace tripod
