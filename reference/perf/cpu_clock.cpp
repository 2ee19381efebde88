#include "perf/cpu_clock.h"

#include <algorithm>
#include <cstdint>

#include "core/host_cpus.h"

namespace tripod {
namespace {

#if defined(__x86_64__)
// 256 dependent operations (the same register) per loop iteration.
#define TRIPOD_TIMES4(op) op op op op
#define TRIPOD_TIMES64(op) TRIPOD_TIMES4(TRIPOD_TIMES4(TRIPOD_TIMES4(op)))
#define TRIPOD_TIMES256(op) TRIPOD_TIMES4(TRIPOD_TIMES64(op))
constexpr int64_t kOpsPerIteration = 256;

enum class Chain { RegisterAdd, Multiply };

// Timed on the thread's CPU clock, not the wall clock: a run the scheduler interrupts (another
// process on the core) is not charged the time it waited, which on a loaded 2-core VM read 1665 MHz
// of ~2950.
double one_run_mhz(Chain chain, int64_t iterations) {
  uint64_t value = 3;
  const uint64_t one = 1;
  const double start = thread_cpu_seconds();
  for (int64_t i = 0; i < iterations; ++i) {
    if (chain == Chain::RegisterAdd) asm volatile(TRIPOD_TIMES256("add %1, %0\n\t") : "+r"(value) : "r"(one));
    else asm volatile(TRIPOD_TIMES256("imul %0, %0\n\t") : "+r"(value));
  }
  const double seconds = thread_cpu_seconds() - start;
  const double cycles_per_op = chain == Chain::RegisterAdd ? 1 : 3;
  return seconds > 0 ? static_cast<double>(iterations * kOpsPerIteration) * cycles_per_op / seconds / 1e6 : 0;
}

double measure() {
  one_run_mhz(Chain::RegisterAdd, 20000);  // wakes the core up from an idle clock
  double lowest = 0;
  for (Chain chain : {Chain::RegisterAdd, Chain::Multiply}) {
    // ~3.1M cycles a run (about 1 ms), shorter than a scheduler slice, and the best of 16: a run
    // spanning an interruption still pays the switch and the cold caches after it.
    const int64_t iterations = chain == Chain::RegisterAdd ? 12000 : 4000;
    double best = 0;
    for (int run = 0; run < 16; ++run) best = std::max(best, one_run_mhz(chain, iterations));
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
