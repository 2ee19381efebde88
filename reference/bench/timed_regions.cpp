#include "bench/timed_regions.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/wall_clock.h"

namespace tripod::bench {
double median(std::vector<double> values) {
  check(!values.empty(), "median of no values");
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

RegionTiming time_regions(Backend& backend, const std::function<void()>& call, int repeat, double min_time_ms) {
  check(repeat >= 1, "--repeat must be at least 1, got ", repeat);
  call();  // first call: handles, heuristics, module loads, page faults
  backend.synchronize();
  auto start = std::chrono::steady_clock::now();
  call();
  backend.synchronize();
  const double one = std::max(seconds_since(start), 1e-9);
  RegionTiming timing{static_cast<int>(std::clamp(std::ceil(min_time_ms * 1e-3 / one), 1.0, static_cast<double>(kMaxCallsPerRegion))), 0, 0};
  std::vector<double> per_call;
  for (int r = 0; r < repeat; ++r) {
    backend.synchronize();  // a device runs asynchronously: time from idle to done
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < timing.calls_per_region; ++i) call();
    backend.synchronize();
    per_call.push_back(seconds_since(start) / timing.calls_per_region);
  }
  timing.median_seconds = median(per_call);
  timing.best_seconds = *std::min_element(per_call.begin(), per_call.end());
  return timing;
}

}  // namespace tripod::bench
