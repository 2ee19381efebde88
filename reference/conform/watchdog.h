// A deadline for one conformance layout. If the layout has not finished when it expires (a rank
// failed alone and the others wait for it in a collective, or something hangs), the watchdog
// thread reports it through `on_expiry` (rank 0 writes the JSON and JUnit reports with a timeout
// row) and ends this process with a non-zero status; mpirun then ends the other ranks. The
// watchdog never calls MPI: under MPI_THREAD_FUNNELED only the main thread may.
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tripod::conform {

class Watchdog {
 public:
  // exit_delay_seconds: how long to wait after on_expiry before exiting (non-reporting ranks wait,
  // so that the reporting rank writes its report before mpirun ends the job).
  Watchdog(double timeout_seconds, double exit_delay_seconds, std::function<void(const std::string& what)> on_expiry);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void arm(const std::string& what);  // starts the deadline for `what`
  void disarm();                       // `what` finished in time

 private:
  void watch();

  double timeout_, exit_delay_;
  std::function<void(const std::string&)> on_expiry_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string what_;
  bool armed_ = false, stopping_ = false;
  unsigned long generation_ = 0;
  std::thread thread_;
};

}  // namespace tripod::conform
