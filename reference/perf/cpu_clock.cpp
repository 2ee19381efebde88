#include "perf/cpu_clock.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace tripod {
namespace {

#if defined(__x86_64__)
// 256 additions, each waiting for the one before (the same register), per loop iteration.
#define TRIPOD_ADD4 "add $1, %0\n\t" "add $1, %0\n\t" "add $1, %0\n\t" "add $1, %0\n\t"
#define TRIPOD_ADD16 TRIPOD_ADD4 TRIPOD_ADD4 TRIPOD_ADD4 TRIPOD_ADD4
#define TRIPOD_ADD64 TRIPOD_ADD16 TRIPOD_ADD16 TRIPOD_ADD16 TRIPOD_ADD16
constexpr int64_t kAddsPerIteration = 256;

double one_run_mhz(int64_t iterations) {
  uint64_t chain = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i)
    asm volatile(TRIPOD_ADD64 TRIPOD_ADD64 TRIPOD_ADD64 TRIPOD_ADD64 : "+r"(chain));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds > 0 ? static_cast<double>(iterations * kAddsPerIteration) / seconds / 1e6 : 0;
}

double measure() {
  one_run_mhz(20000);  // wakes the core up from an idle clock
  double best = 0;
  for (int run = 0; run < 3; ++run) best = std::max(best, one_run_mhz(120000));  // ~30.7M cycles each
  return best;
}
#else
double measure() { return 0; }
#endif

}  // namespace

double measured_cpu_clock_mhz() {
  static const double mhz = measure();
  return mhz;
}

}  // namespace tripod
