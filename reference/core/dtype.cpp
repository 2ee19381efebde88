#include "core/dtype.h"

#include "core/error.h"

namespace tripod {

std::string dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F64: return "fp64";
    case DType::BF16: return "bf16";
    case DType::I32: return "int32";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return DType::F32;
  if (name == "fp64" || name == "float64") return DType::F64;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  fail("unknown dtype '", name, "' (expected fp32, fp64 or bf16)");
}

std::string device_name(Device device) {
  switch (device) {
    case Device::Host: return "host";
    case Device::Emulated: return "emulated device";
    case Device::Cuda: return "cuda";
  }
  return "?";
}

}  // namespace tripod
