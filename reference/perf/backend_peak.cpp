#include "perf/backend_peak.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/error.h"

namespace tripod {

PeakPrecision gemm_peak_precision(DType ab) {
  switch (ab) {
    case DType::BF16: return PeakPrecision::BF16;
    case DType::F32: return PeakPrecision::FP32;
    case DType::F64: return PeakPrecision::FP64;
    case DType::I32: break;
  }
  fail("no GEMM peak for ", dtype_name(ab), " arithmetic (bf16, fp32 or fp64)");
}

std::string cuda_device_of_backend(std::string_view backend_name) {
  constexpr std::string_view prefix = "cuda (";
  if (backend_name.substr(0, prefix.size()) != prefix) return "";
  const std::string_view rest = backend_name.substr(prefix.size());
  // The device name ends at the first ", " (before "sm_90") or at the closing parenthesis.
  const std::size_t end = std::min(rest.find(", "), rest.find(')'));
  return std::string(rest.substr(0, end));
}

namespace {

PeakFlops unknown_peak(std::string_view device, PeakPrecision precision, std::string_view why) {
  return {0, "peak unknown: " + std::string(device) + " " + std::string(why) + " for " +
                 peak_precision_name(precision) + " (reference/perf/device_peak.cpp); state one with --set "
                 "train.peak_tflops=... or --peak-tflops"};
}

}  // namespace

PeakFlops table_peak_or_unknown(std::string_view device, DType dtype) {
  return table_peak_or_unknown(device, gemm_peak_precision(dtype));
}

PeakFlops table_peak_or_unknown(std::string_view device, PeakPrecision precision) {
  const std::optional<DevicePeakSpec> spec = find_device_peak(device);
  if (!spec && is_mig_slice(device))
    return unknown_peak(device, precision,
                        "is a MIG slice (a share of the SMs; the datasheet's peak is the whole GPU's)");
  if (!spec) return unknown_peak(device, precision, "is not in the peak table");
  if (spec->tflops(precision) <= 0) return unknown_peak(device, precision, "has no datasheet figure");
  return device_peak(device, precision);
}

PeakFlops backend_peak(std::string_view backend_name, DType dtype, double stated_tflops) {
  return backend_peak(backend_name, gemm_peak_precision(dtype), stated_tflops);
}

PeakFlops backend_peak(std::string_view backend_name, PeakPrecision precision, double stated_tflops) {
  // The CPU runs fp64 as fp64 and emulates bf16 and TF32 GEMMs in fp32: its fp32 or fp64 peak.
  const DType cpu_dtype = precision == PeakPrecision::FP64 ? DType::F64 : DType::F32;
  if (stated_tflops > 0) return resolve_peak(stated_tflops, cpu_dtype);
  const std::string cuda_device = cuda_device_of_backend(backend_name);
  if (!cuda_device.empty()) return table_peak_or_unknown(cuda_device, precision);
  // The factory's bare name says no device: only the made backend's name() does.
  if (backend_name == "cuda") return unknown_peak("(a CUDA device not yet opened)", precision, "is unnamed");
  return nominal_cpu_peak(cpu_dtype);
}

std::string percent_of_peak_text(double flops_per_second, const PeakFlops& peak) {
  if (peak.flops <= 0) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * flops_per_second / peak.flops);
  return text;
}

}  // namespace tripod
