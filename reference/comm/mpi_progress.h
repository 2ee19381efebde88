// Background progress for MPI's non-blocking operations. Open MPI advances a non-blocking
// collective only inside MPI calls ("OMPI progress: no" in Debian's ompi_info: no asynchronous
// progress thread of its own), and a rank computing its backward makes none for milliseconds at a
// time, so a gradient bucket's all-reduce sat still until the next layer's hook tested it. While
// any non-blocking operation of this process is in flight, a progress thread calls MPI_Iprobe on
// a private communicator (which never carries a message: the call only runs MPI's progress loop)
// every `interval`, sleeping in between, and sleeps on a condition variable when nothing is in
// flight - so it costs nothing to a run without overlap and a few microseconds per poll otherwise.
// Progress moves bytes, never reorders a reduction: results stay bit-identical.
//
// It needs MPI_THREAD_MULTIPLE (the main thread tests and waits on the same operations), which
// MpiRuntime asks for. It is off unless asked for (`--mpi-progress-us N`): on this project's
// 2-core machine, where every core computes, it hid less, not more (`tripod bench overlap`
// measures it beside plain bucketing in the same run; see the README). Communication through
// shared memory is CPU work: it can only hide behind computation on a core that has time to spare.
#pragma once
#include <chrono>

namespace tripod {

class MpiProgress {
 public:
  // The process's progress engine, or nullptr when none runs (not started, or not supported).
  static MpiProgress* instance();
  // After MPI_Init_thread gave MPI_THREAD_MULTIPLE (throws otherwise); restarts with a new interval.
  static void start(std::chrono::microseconds interval);
  static void stop();                                     // before MPI_Finalize
  static bool running() { return instance() != nullptr; }

  void hold();     // a non-blocking operation started
  void release();  // ... and completed
  long polls() const;  // MPI_Iprobe calls made so far (for tests and reports)

  struct State;  // the thread and its bookkeeping (mpi_progress.cpp)

 private:
  MpiProgress() = default;
};

}  // namespace tripod
