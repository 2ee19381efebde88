// Peak FLOP/s to measure MFU against.
//
// Accelerators: a table of dense (no structured sparsity) peaks from the vendors' datasheets,
// looked up by a substring of the device name the driver reports ("NVIDIA H100 80GB HBM3").
// Datasheets quote tensor-core figures "with sparsity" (2:4); the table holds half of those,
// the dense rate a GEMM can reach.
//
// CPU: the nominal peak is estimated as cores x clock x FLOPs per cycle (two FMA units: 64 fp32
// FLOP/cycle with AVX-512, 32 with AVX2; half for fp64; the vector units from /proc/cpuinfo's
// flags), the clock the faster of /proc/cpuinfo's and a measured one (perf/cpu_clock.h: a VM's
// cpuinfo gives a fixed base clock below the one its cores run at). It is an upper bound:
// sustained AVX-512 clocks are often lower, so a measured sgemm rate is reported beside it
// (tripod bench train, tripod bench gemm), each labelled as what it is.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace tripod {

struct PeakFlops {
  double flops = 0;       // FLOP/s
  std::string source;     // how it was obtained, printed next to the MFU
};

PeakFlops nominal_cpu_peak(DType dtype);
// `tflops` > 0 is a user-stated peak; otherwise the nominal CPU peak.
PeakFlops resolve_peak(double tflops, DType dtype);

// The arithmetic a GEMM runs in on an accelerator. TF32 is fp32 data on tensor cores; FP32 is
// the plain (non-tensor) fp32 pipeline; FP64 is the fp64 matrix (tensor-core) rate DGEMM uses.
enum class PeakPrecision { BF16, TF32, FP32, FP64 };
std::string peak_precision_name(PeakPrecision p);  // "bf16", "tf32", "fp32", "fp64"

// One row of the table: dense TFLOP/s per precision; 0 where the datasheet gives no figure.
struct DevicePeakSpec {
  std::string_view match;  // case-insensitive substring of the reported device name
  std::string_view name;   // the product, as the datasheet names it
  double bf16_tflops = 0, tf32_tflops = 0, fp32_tflops = 0, fp64_tflops = 0;
  std::string_view datasheet;
  double tflops(PeakPrecision p) const;
};

// Every known device, most specific match first ("H100 PCIe" before "H100").
std::span<const DevicePeakSpec> known_device_peaks();
// The table's products, comma-separated ("NVIDIA H100 PCIe, ..."), for an error naming what is known.
std::string known_device_names();
// True for a MIG instance's name ("NVIDIA H100 80GB HBM3 MIG 1g.10gb"): a slice of the GPU's SMs.
bool is_mig_slice(std::string_view device_name);
// The first row whose `match` occurs in `device_name` (case-insensitive), or none; none for a MIG
// slice, which runs on a share of the SMs the datasheet's whole-GPU peak counts.
std::optional<DevicePeakSpec> find_device_peak(std::string_view device_name);
// The table's peak for a device and precision; throws tripod::Error naming the device when it is
// not in the table or the datasheet gives no figure for that precision (state one with --set).
PeakFlops device_peak(std::string_view device_name, PeakPrecision precision);

}  // namespace tripod
