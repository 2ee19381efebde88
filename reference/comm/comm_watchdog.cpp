#include "comm/comm_watchdog.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace tripod {
namespace {

using Clock = std::chrono::steady_clock;

// The one open outermost scope of the process, and the thread that watches it.
class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog w;
    return w;
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void open(const Communicator* comm, CommOp op, const std::string* what, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { watch(); });
    comm_ = comm;
    op_ = op;
    what_ = what;
    since_ = now;
    timeout_ = timeout_seconds.load();
    open_ = true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = false;
  }

  std::atomic<double> timeout_seconds{kDefaultCommTimeoutSeconds};
  std::mutex label_mutex;
  std::string label;

 private:
  Watchdog() = default;

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      // Checked a few times a second: a timeout is reported at most ~0.2 s late.
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      if (stopping_ || !open_ || timeout_ <= 0) continue;
      const double waited = std::chrono::duration<double>(Clock::now() - since_).count();
      if (waited < timeout_) continue;
      // The waiting thread is blocked (it cannot close the scope while we hold the lock), so the
      // communicator it waits in is alive.
      const std::string waiting_in = what_ ? *what_ : comm_->where(op_);
      std::string process;
      {
        std::lock_guard<std::mutex> label_lock(label_mutex);
        process = label;
      }
      const std::string message = comm_timeout_message(process, waiting_in, timeout_) + "\n";
      // write(2), not stdio: the main thread may hold stdio's locks; then end at once (the blocked
      // MPI call cannot return, and exit handlers could wait for it).
      const ssize_t written = ::write(STDERR_FILENO, message.data(), message.size());
      (void)written;
      ::_exit(kCommTimeoutExitCode);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
  bool stopping_ = false;
  bool open_ = false;
  const Communicator* comm_ = nullptr;
  CommOp op_ = CommOp::Barrier;
  const std::string* what_ = nullptr;
  Clock::time_point since_;
  double timeout_ = 0;
};

thread_local int scope_depth = 0;
std::atomic<double> total_wait_seconds{0};

double seconds_of(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }
double steady_seconds() { return seconds_of(Clock::now()); }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

void set_comm_timeout(double seconds) {
  check(seconds == seconds, "--comm-timeout: not a number");
  Watchdog::instance().timeout_seconds.store(seconds);
}

double comm_timeout_seconds() { return Watchdog::instance().timeout_seconds.load(); }

void set_comm_process_label(const std::string& label) {
  Watchdog& w = Watchdog::instance();
  std::lock_guard<std::mutex> lock(w.label_mutex);
  w.label = label;
}

std::string comm_timeout_message(const std::string& process_label, const std::string& waiting_in, double seconds) {
  return str_cat("tripod: error: ", process_label.empty() ? "" : process_label + ": ", waiting_in,
                 " waited ", seconds_text(seconds), " s for its peers without completing (--comm-timeout ",
                 seconds_text(seconds), "): a peer rank is stopped, hung, or waiting in a different operation;",
                 " ending the job (exit ", kCommTimeoutExitCode, ")");
}

CommWaitScope::CommWaitScope(const Communicator& comm, CommOp op) { open(&comm, op, nullptr); }
CommWaitScope::CommWaitScope(const std::string& what) { open(nullptr, CommOp::Barrier, &what); }

void CommWaitScope::open(const Communicator* comm, CommOp op, const std::string* what) {
  if (scope_depth++ > 0) return;
  outermost_ = true;
  const Clock::time_point now = Clock::now();  // one clock read for both (a small call's cost counts)
  opened_at_ = seconds_of(now);
  if (comm_timeout_seconds() > 0) Watchdog::instance().open(comm, op, what, now);
}

CommWaitScope::~CommWaitScope() {
  --scope_depth;
  if (!outermost_) return;
  Watchdog::instance().close();
  add_comm_wait_seconds(steady_seconds() - opened_at_);
}

double comm_wait_seconds() { return total_wait_seconds.load(); }

void add_comm_wait_seconds(double seconds) {
  double old = total_wait_seconds.load();
  while (!total_wait_seconds.compare_exchange_weak(old, old + seconds)) {
  }
}

}  // namespace tripod
