#include "perf/device_peak.h"

#include <omp.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace tripod {

PeakFlops nominal_cpu_peak(DType dtype) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  double mhz = 0;
  while (std::getline(cpuinfo, line)) {
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::stod(line.substr(line.find(':') + 1));
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  const bool avx512 = flags.find(" avx512f") != std::string::npos;
  const bool avx2 = flags.find(" avx2") != std::string::npos && flags.find(" fma") != std::string::npos;
  double per_cycle = avx512 ? 64 : avx2 ? 32 : 8;
  if (dtype == DType::F64) per_cycle /= 2;
  const int cores = omp_get_max_threads();
  PeakFlops p;
  p.flops = cores * mhz * 1e6 * per_cycle;
  char buf[160];
  std::snprintf(buf, sizeof buf, "nominal CPU peak: %d threads x %.0f MHz x %.0f %s FLOP/cycle", cores, mhz, per_cycle,
                dtype_name(dtype).c_str());
  p.source = buf;
  return p;
}

PeakFlops resolve_peak(double tflops, DType dtype) {
  if (tflops > 0) return {tflops * 1e12, "stated peak (--set train.peak_tflops)"};
  return nominal_cpu_peak(dtype);
}

}  // namespace tripod
