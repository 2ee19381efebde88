// How the device benchmarks (gemm-rate, kernel-rate) time one operation through the Backend
// interface: two warm-up calls (library handles, heuristics, caches, page faults), then `repeat`
// timed regions, each bracketed by backend.synchronize() and read on the wall clock. A region runs
// the call `calls_per_region` times back to back, chosen from the second warm-up so that a region
// lasts at least `min_time_ms`: one small kernel on a GPU (~10 us) is shorter than the
// synchronisation around it, which would otherwise be what is measured. Median and best per call.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"

namespace tripod::bench {

// Bounds of a region: --min-time-ms up to a minute; the calls up to a million, a guard against a
// warm-up call timed near 0 (a region of 10 us kernels reaches 10 s first).
constexpr double kMaxRegionMs = 60000;
constexpr int kMaxCallsPerRegion = 1000000;

struct RegionTiming {
  int calls_per_region = 1;
  double median_seconds = 0, best_seconds = 0;  // per call
};

RegionTiming time_regions(Backend& backend, const std::function<void()>& call, int repeat, double min_time_ms);

// The middle value (the upper one of an even count), as every benchmark here reports.
double median(std::vector<double> values);

}  // namespace tripod::bench
