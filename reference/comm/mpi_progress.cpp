#include "comm/mpi_progress.h"

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace tripod {

struct MpiProgress::State {
  MpiProgress engine;
  MPI_Comm quiet = MPI_COMM_NULL;  // a duplicate of MPI_COMM_SELF no one sends on
  std::chrono::microseconds interval{50};
  std::mutex mutex;
  std::condition_variable wake;
  int in_flight = 0;  // guarded by mutex
  bool stopping = false;
  std::atomic<long> polls{0};
  std::thread thread;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      wake.wait(lock, [&] { return stopping || in_flight > 0; });
      if (stopping) return;
      lock.unlock();
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, quiet, &flag, MPI_STATUS_IGNORE);
      polls.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(interval);
      lock.lock();
    }
  }
};

namespace {
std::unique_ptr<MpiProgress::State>& state() {
  static std::unique_ptr<MpiProgress::State> s;
  return s;
}
}  // namespace

MpiProgress* MpiProgress::instance() { return state() ? &state()->engine : nullptr; }

void MpiProgress::start(std::chrono::microseconds interval) {
  stop();
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  check(level >= MPI_THREAD_MULTIPLE, "--mpi-progress-us: this MPI provides thread level ", level,
        ", not MPI_THREAD_MULTIPLE, which a progress thread needs");
  check(interval.count() > 0, "--mpi-progress-us must be positive (0 turns the progress thread off)");
  auto s = std::make_unique<State>();
  s->interval = interval;
  MPI_Comm_dup(MPI_COMM_SELF, &s->quiet);
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->run(); });
  state() = std::move(s);
}

void MpiProgress::stop() {
  auto& s = state();
  if (!s) return;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->stopping = true;
  }
  s->wake.notify_all();
  s->thread.join();
  MPI_Comm_free(&s->quiet);
  s.reset();
}

void MpiProgress::hold() {
  State& s = *state();
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    first = s.in_flight++ == 0;
  }
  if (first) s.wake.notify_one();
}

void MpiProgress::release() {
  State& s = *state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.in_flight > 0) --s.in_flight;  // an operation started before a restart ends after it
}

long MpiProgress::polls() const { return state()->polls.load(std::memory_order_relaxed); }

}  // namespace tripod
