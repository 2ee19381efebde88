#include "perf/device_peak.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/host_cpus.h"
#include "perf/cpu_clock.h"

namespace tripod {

PeakFlops nominal_cpu_peak(DType dtype) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  double cpuinfo_mhz = 0;
  while (std::getline(cpuinfo, line)) {
    if (cpuinfo_mhz == 0 && line.rfind("cpu MHz", 0) == 0) cpuinfo_mhz = std::stod(line.substr(line.find(':') + 1));
#if !defined(__x86_64__)
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
#endif
  }
#if defined(__x86_64__)
  // From CPUID, which needs no /proc (a chroot or a bare container may have none).
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx512 = flags.find(" avx512f") != std::string::npos;
  const bool avx2 = flags.find(" avx2") != std::string::npos && flags.find(" fma") != std::string::npos;
#endif
  double per_cycle = avx512 ? 64 : avx2 ? 32 : 8;
  if (dtype == DType::F64) per_cycle /= 2;
  // Threads beyond the CPUs this process may run on add no FLOPs: OMP_NUM_THREADS=1000 on 2 cores
  // made the peak 500x too large and the MFU 0.00%.
  const int threads = omp_get_max_threads();
  const int cores = std::min(threads, available_cores());
  // The faster of the two clocks: cpuinfo's can be a fixed base clock (perf/cpu_clock.h), the
  // measured one a core slowed by a busy machine.
  const double measured_mhz = measured_cpu_clock_mhz();
  const double mhz = std::max(cpuinfo_mhz, measured_mhz);
  PeakFlops p;
  p.flops = cores * mhz * 1e6 * per_cycle;
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "nominal CPU peak: %d %s x %.0f MHz x %.0f %s FLOP/cycle (clock: %s; measured %.0f MHz, "
                "/proc/cpuinfo %.0f MHz)",
                cores, cores < threads ? "CPUs (fewer than the threads)" : "threads", mhz, per_cycle, dtype_name(dtype).c_str(), measured_mhz >= cpuinfo_mhz ? "measured" : "/proc/cpuinfo",
                measured_mhz, cpuinfo_mhz);
  p.source = buf;
  return p;
}

PeakFlops resolve_peak(double tflops, DType dtype) {
  if (tflops > 0) return {tflops * 1e12, "stated peak (--set train.peak_tflops)"};
  return nominal_cpu_peak(dtype);
}

std::string peak_precision_name(PeakPrecision p) {
  switch (p) {
    case PeakPrecision::BF16: return "bf16";
    case PeakPrecision::TF32: return "tf32";
    case PeakPrecision::FP32: return "fp32";
    case PeakPrecision::FP64: return "fp64";
  }
  return "?";
}

double DevicePeakSpec::tflops(PeakPrecision p) const {
  switch (p) {
    case PeakPrecision::BF16: return bf16_tflops;
    case PeakPrecision::TF32: return tf32_tflops;
    case PeakPrecision::FP32: return fp32_tflops;
    case PeakPrecision::FP64: return fp64_tflops;
  }
  return 0;
}

namespace {

// Dense peaks, TFLOP/s: {match, name, bf16, tf32, fp32 (non-tensor), fp64 (matrix), datasheet}.
// NVIDIA's tensor-core figures are printed "with sparsity"; the bf16 and tf32 columns are half
// of those. A match is whole words of the driver's name ("NVIDIA L40" is not an L4, "NVIDIA A10G"
// not an A10: both took the smaller card's peaks by a plain substring test); the first match wins,
// so variants ("H100 PCIe") precede their family name ("H100").
constexpr std::array kDevicePeaks{
    DevicePeakSpec{"H100 PCIe", "NVIDIA H100 PCIe", 756.5, 378, 51, 51,
                   "NVIDIA H100 Tensor Core GPU datasheet (BF16 1,513 / TF32 756 TFLOPS with sparsity)"},
    DevicePeakSpec{"H100 NVL", "NVIDIA H100 NVL", 835.5, 417.5, 60, 60,
                   "NVIDIA H100 Tensor Core GPU datasheet (BF16 1,671 / TF32 835 TFLOPS with sparsity)"},
    DevicePeakSpec{"H100", "NVIDIA H100 SXM5", 989.5, 494.5, 67, 67,
                   "NVIDIA H100 Tensor Core GPU datasheet (BF16 1,979 / TF32 989 TFLOPS with sparsity)"},
    DevicePeakSpec{"GH200", "NVIDIA GH200 Grace Hopper Superchip", 989.5, 494.5, 67, 67,
                   "NVIDIA GH200 Grace Hopper Superchip datasheet (BF16 1,979 / TF32 989 TFLOPS with sparsity)"},
    DevicePeakSpec{"H200 NVL", "NVIDIA H200 NVL", 835.5, 417.5, 60, 60,
                   "NVIDIA H200 Tensor Core GPU datasheet (BF16 1,671 / TF32 835 TFLOPS with sparsity)"},
    DevicePeakSpec{"H200", "NVIDIA H200 SXM", 989.5, 494.5, 67, 67,
                   "NVIDIA H200 Tensor Core GPU datasheet (BF16 1,979 / TF32 989 TFLOPS with sparsity)"},
    DevicePeakSpec{"A100", "NVIDIA A100 (SXM4 and PCIe)", 312, 156, 19.5, 19.5,
                   "NVIDIA A100 Tensor Core GPU datasheet (BF16 312 / TF32 156 TFLOPS dense)"},
    DevicePeakSpec{"A10", "NVIDIA A10", 125, 62.5, 31.2, 0,
                   "NVIDIA A10 Tensor Core GPU datasheet (BF16 250 / TF32 125 TFLOPS with sparsity)"},
    DevicePeakSpec{"L40S", "NVIDIA L40S", 362.05, 183, 91.6, 0,
                   "NVIDIA L40S datasheet (BF16 733 / TF32 366 TFLOPS with sparsity)"},
    DevicePeakSpec{"L40", "NVIDIA L40", 181.05, 90.5, 90.5, 0,
                   "NVIDIA L40 datasheet (BF16 362.1 / TF32 181 TFLOPS with sparsity, FP32 90.5)"},
    DevicePeakSpec{"L4", "NVIDIA L4", 121, 60, 30.3, 0,
                   "NVIDIA L4 Tensor Core GPU datasheet (BF16 242 / TF32 120 TFLOPS with sparsity)"},
    DevicePeakSpec{"MI300X", "AMD Instinct MI300X", 1307.4, 653.7, 163.4, 163.4,
                   "AMD Instinct MI300X accelerator data sheet (dense; FP32 vector, FP64 matrix)"},
    DevicePeakSpec{"MI250X", "AMD Instinct MI250X", 383, 0, 47.9, 95.7,
                   "AMD Instinct MI250X accelerator data sheet (dense; FP32 vector, FP64 matrix)"},
};

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::span<const DevicePeakSpec> known_device_peaks() { return kDevicePeaks; }

bool is_mig_slice(std::string_view device_name) {
  // CUDA names a MIG instance after its GPU with the profile appended: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
  std::string name(" ");
  name += lowercase(device_name);
  name += ' ';
  return name.find(" mig ") != std::string::npos;
}

std::optional<DevicePeakSpec> find_device_peak(std::string_view device_name) {
  if (is_mig_slice(device_name)) return std::nullopt;  // a share of the SMs: the whole GPU's peak would flatter it
  const std::string name = lowercase(device_name);
  // Past either end, or a character that is no letter or digit.
  auto word_edge = [&](std::size_t at) { return at >= name.size() || !std::isalnum(static_cast<unsigned char>(name[at])); };
  for (const DevicePeakSpec& spec : kDevicePeaks) {
    const std::string match = lowercase(spec.match);
    for (std::size_t at = name.find(match); at != std::string::npos; at = name.find(match, at + 1))
      if ((at == 0 || word_edge(at - 1)) && word_edge(at + match.size())) return spec;
  }
  return std::nullopt;
}

std::string known_device_names() {
  std::string names;
  for (const DevicePeakSpec& spec : known_device_peaks()) names += (names.empty() ? "" : ", ") + std::string(spec.name);
  return names;
}

PeakFlops device_peak(std::string_view device_name, PeakPrecision precision) {
  const std::optional<DevicePeakSpec> spec = find_device_peak(device_name);
  check(spec.has_value(), "device \"", device_name, "\" ",
        is_mig_slice(device_name)
            ? "is a MIG slice, whose share of the GPU's SMs the datasheet's peak does not describe"
            : "is not in the peak table (reference/perf/device_peak.cpp)",
        ": state its peak with --set train.peak_tflops=...");
  const double tflops = spec->tflops(precision);
  TRIPOD_CHECK(tflops > 0, "the datasheet of ", spec->name, " gives no dense ", peak_precision_name(precision),
               " peak: state one with --set train.peak_tflops=...");
  std::ostringstream source;
  source << spec->name << " dense " << peak_precision_name(precision) << " peak " << tflops << " TFLOP/s ("
         << spec->datasheet << ")";
  return {tflops * 1e12, source.str()};
}

}  // namespace tripod
