// Seconds of wall time since `start`, on the steady clock (timings of steps, saves, benchmarks).
#pragma once
#include <chrono>

namespace tripod {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tripod
