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
  // The probe: 1, 2, 4, ... calls until they last a millisecond (or the region's whole time).
  double one = 0;
  for (int64_t n = 1;; n *= 2) {
    const auto probe = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) call();
    backend.synchronize();
    const double seconds = seconds_since(probe);
    if (seconds >= std::min(1e-3, min_time_ms * 1e-3) || n >= (int64_t{1} << 40)) {
      one = std::max(seconds / static_cast<double>(n), 1e-12);
      break;
    }
  }
  RegionTiming timing{static_cast<int64_t>(std::max(1.0, std::ceil(min_time_ms * 1e-3 / one))), 0, 0};
  std::vector<double> per_call;
  for (int r = 0; r < repeat; ++r) {
    backend.synchronize();  // a device runs asynchronously: time from idle to done
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < timing.calls_per_region; ++i) call();
    backend.synchronize();
    per_call.push_back(seconds_since(start) / timing.calls_per_region);
  }
  timing.median_seconds = median(per_call);
  timing.best_seconds = *std::min_element(per_call.begin(), per_call.end());
  return timing;
}

}  // namespace tripod::bench
