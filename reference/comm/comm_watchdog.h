// No wait for a peer lasts forever. A rank that dies is noticed by the launcher (mpirun ends the
// job within about a second), but a rank that is stopped (SIGSTOP, a debugger, a hung driver) or
// that waits in a different collective leaves its peers blocked inside MPI with nothing to say.
// Every blocking collective and every wait() on a request therefore runs inside a CommWaitScope;
// a watchdog thread checks the one open scope of the process and, once it has been open longer
// than the timeout, writes which operation, group and rank were waiting and ends the process with
// kCommTimeoutExitCode. A blocking MPI call cannot be interrupted from its own thread, so ending
// the process is the only way out; the launcher then takes the other ranks down (non-zero exit).
//
// The timeout is the longest any rank may wait for the others: it must exceed the longest stretch
// of work one rank does alone between collectives (a checkpoint write, an evaluation). Default
// 300 s (`--comm-timeout SECONDS`, 0 turns the watchdog off).
#pragma once
#include <string>

#include "comm/communicator.h"

namespace tripod {

constexpr int kCommTimeoutExitCode = 124;  // the exit code of timeout(1)
constexpr double kDefaultCommTimeoutSeconds = 300;

// Seconds; <= 0 disables the watchdog. Applies to scopes opened after the call.
void set_comm_timeout(double seconds);
double comm_timeout_seconds();
// How this process is named in the watchdog's message: "rank 3 of 8" (set once the world is known).
void set_comm_process_label(const std::string& label);

// Seconds this process has spent waiting for its peers (inside outermost scopes, and in the NCCL
// communicator's waits): a step's time minus its waits is the rank's own work, which is how a
// straggler is told from the ranks that wait for it (train/rank_timing.h).
double comm_wait_seconds();
void add_comm_wait_seconds(double seconds);

// "tripod: error: rank 1 of 2: all_reduce on mpi:world/dp (rank 0 of 2) waited 3 s ..." (one line).
std::string comm_timeout_message(const std::string& process_label, const std::string& waiting_in, double seconds);

// While alive, this thread waits for peers in `op` on `comm` (or in the operation `what` names).
// Scopes nest: only the outermost one is watched (a staged collective waits inside its host
// communicator's). Communication happens on one thread (MPI_THREAD_FUNNELED), so at most one
// outermost scope is open per process.
class CommWaitScope {
 public:
  CommWaitScope(const Communicator& comm, CommOp op);  // the message is built only on a timeout
  explicit CommWaitScope(const std::string& what);       // `what` must outlive the scope
  ~CommWaitScope();
  CommWaitScope(const CommWaitScope&) = delete;
  CommWaitScope& operator=(const CommWaitScope&) = delete;

 private:
  void open(const Communicator* comm, CommOp op, const std::string* what);
  bool outermost_ = false;
  double opened_at_ = 0;  // seconds on the steady clock
};

}  // namespace tripod
