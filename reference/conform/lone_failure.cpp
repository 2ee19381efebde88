#include "conform/lone_failure.h"

#include <algorithm>
#include <thread>

namespace tripod::conform {

namespace {
constexpr double kGraceSeconds = 10;
constexpr double kGraceRowTimes = 3;
}  // namespace

double lone_failure_grace(double row_seconds, double timeout_seconds) {
  const double grace = std::max(kGraceSeconds, kGraceRowTimes * row_seconds);
  return row_seconds + grace < timeout_seconds ? grace : -1;
}

bool completes_within(CommRequest& request, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!request.test()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace tripod::conform
