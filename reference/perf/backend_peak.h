// The one place that decides which peak a measurement on a backend is held against, so that
// `tripod bench gemm-rate`, `tripod bench train` and the trainer's MFU print agree.
//
//   a stated peak (--set train.peak_tflops, > 0)  -> that
//   a CUDA backend ("cuda (NVIDIA H200, sm_90, device 0)") -> the datasheet table of
//       perf/device_peak.h for the device named inside the parentheses, at the precision the
//       arithmetic runs in (gemm_peak_precision below)
//   cpu, emulated (the CPU arithmetic)            -> the nominal CPU peak of this machine
//
// A device missing from the table is not an error: the peak is then unknown (flops 0, a source
// saying so and how to state one), and callers print "n/a" instead of a percentage. A run on an
// unlisted GPU must still train and benchmark; only its percentage is missing.
#pragma once
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "perf/device_peak.h"

namespace tripod {

// The accelerator precision whose peak a GEMM with A and B in `ab` is held against: bf16 ->
// BF16 (tensor cores, fp32 accumulation), fp32 -> FP32 (the plain fp32 pipeline: Tripod keeps
// TF32 off), fp64 -> FP64. Throws for int32.
PeakPrecision gemm_peak_precision(DType ab);

// "NVIDIA H200" from a CUDA backend's name "cuda (NVIDIA H200, sm_90, device 0)"; empty when the
// name is not a CUDA backend's.
std::string cuda_device_of_backend(std::string_view backend_name);

// The peak for arithmetic in `dtype` on the backend called `backend_name` (Backend::name(), or a
// factory name such as "cpu"); `stated_tflops` > 0 overrides everything.
PeakFlops backend_peak(std::string_view backend_name, DType dtype, double stated_tflops = 0);
// The same for a precision named directly (TF32: fp32 data on tensor cores, which no dtype names).
PeakFlops backend_peak(std::string_view backend_name, PeakPrecision precision, double stated_tflops = 0);

// The table's peak of a device named by its driver ("NVIDIA H200") for GEMMs in `dtype`, or an
// unknown peak (flops 0, the reason in `source`) when the table has no such device or figure.
PeakFlops table_peak_or_unknown(std::string_view device, DType dtype);
PeakFlops table_peak_or_unknown(std::string_view device, PeakPrecision precision);

// "41.3%" of a known peak, "n/a" when the peak is unknown.
std::string percent_of_peak_text(double flops_per_second, const PeakFlops& peak);

}  // namespace tripod
