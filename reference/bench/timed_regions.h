// How the device benchmarks (gemm-rate, kernel-rate) time one operation through the Backend
// interface: a warm-up call (library handles, heuristics, caches, page faults) and a probe, then
// `repeat` timed regions, each bracketed by backend.synchronize() and read on the wall clock. A region
// runs the call `calls_per_region` times back to back, chosen from the probe so that a region
// lasts at least `min_time_ms`: one small kernel on a GPU (~10 us) is shorter than the
// synchronisation around it, which would otherwise be what is measured. Median and best per call.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"

namespace tripod::bench {

// --min-time-ms up to a minute. The calls a region needs come from a probe of the call repeated
// until it lasts a millisecond, so a fast call is not taken for one of no time (a fixed cap of calls
// cut regions of 40 ns GEMMs to 39 ms under a header promising 5 s).
constexpr double kMaxRegionMs = 60000;

struct RegionTiming {
  int64_t calls_per_region = 1;
  double median_seconds = 0, best_seconds = 0;  // per call
};

RegionTiming time_regions(Backend& backend, const std::function<void()>& call, int repeat, double min_time_ms);

// The middle value (the upper one of an even count), as every benchmark here reports.
double median(std::vector<double> values);

}  // namespace tripod::bench
