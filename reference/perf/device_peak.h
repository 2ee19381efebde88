// Peak FLOP/s to measure MFU against. On the CPU the nominal peak is estimated from /proc/cpuinfo:
// cores x clock x FLOPs per cycle (two FMA units: 64 fp32 FLOP/cycle with AVX-512, 32 with AVX2;
// half for fp64). It is an upper bound: sustained AVX-512 clocks are often lower, so a measured
// sgemm rate is also reported where it matters (tripod bench train).
#pragma once
#include <string>

#include "core/dtype.h"

namespace tripod {

struct PeakFlops {
  double flops = 0;       // FLOP/s
  std::string source;     // how it was obtained, printed next to the MFU
};

PeakFlops nominal_cpu_peak(DType dtype);
// `tflops` > 0 is a user-stated peak; otherwise the nominal CPU peak.
PeakFlops resolve_peak(double tflops, DType dtype);

}  // namespace tripod
