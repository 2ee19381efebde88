#include "perf/cpu_clock.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace tripod {
namespace {

#if defined(__x86_64__)
// 256 dependent operations (the same register) per loop iteration.
#define TRIPOD_TIMES4(op) op op op op
#define TRIPOD_TIMES64(op) TRIPOD_TIMES4(TRIPOD_TIMES4(TRIPOD_TIMES4(op)))
#define TRIPOD_TIMES256(op) TRIPOD_TIMES4(TRIPOD_TIMES64(op))
constexpr int64_t kOpsPerIteration = 256;

enum class Chain { RegisterAdd, Multiply };

double one_run_mhz(Chain chain, int64_t iterations) {
  uint64_t value = 3;
  const uint64_t one = 1;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    if (chain == Chain::RegisterAdd) asm volatile(TRIPOD_TIMES256("add %1, %0\n\t") : "+r"(value) : "r"(one));
    else asm volatile(TRIPOD_TIMES256("imul %0, %0\n\t") : "+r"(value));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cycles_per_op = chain == Chain::RegisterAdd ? 1 : 3;
  return seconds > 0 ? static_cast<double>(iterations * kOpsPerIteration) * cycles_per_op / seconds / 1e6 : 0;
}

double measure() {
  one_run_mhz(Chain::RegisterAdd, 20000);  // wakes the core up from an idle clock
  double lowest = 0;
  for (Chain chain : {Chain::RegisterAdd, Chain::Multiply}) {
    const int64_t iterations = chain == Chain::RegisterAdd ? 120000 : 40000;  // ~30.7M cycles a run
    double best = 0;
    for (int run = 0; run < 3; ++run) best = std::max(best, one_run_mhz(chain, iterations));
    lowest = lowest == 0 ? best : std::min(lowest, best);
  }
  return lowest;
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
