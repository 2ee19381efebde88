#include "conform/watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace tripod::conform {

Watchdog::Watchdog(double timeout_seconds, double exit_delay_seconds,
                   std::function<void(const std::string& what)> on_expiry)
    : timeout_(timeout_seconds), exit_delay_(exit_delay_seconds), on_expiry_(std::move(on_expiry)),
      thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::arm(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    armed_ = true;
    ++generation_;
  }
  changed_.notify_all();
}

void Watchdog::disarm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
    ++generation_;
  }
  changed_.notify_all();
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!armed_) {
      changed_.wait(lock);
      continue;
    }
    const unsigned long generation = generation_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
    if (changed_.wait_until(lock, deadline, [&] { return stopping_ || generation_ != generation; })) continue;
    const std::string what = what_;
    lock.unlock();
    on_expiry_(what);
    std::fflush(stdout);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::duration<double>(exit_delay_));
    std::_Exit(3);  // the main thread is stuck in MPI: no destructors, no MPI_Finalize
  }
}

}  // namespace tripod::conform
