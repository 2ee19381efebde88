// The MPI operations under MpiCommunicator (comm/mpi_communicator.h): one started operation as a
// CommRequest (MpiRequest), and the issuing of each collective or message as MPI's blocking or
// non-blocking call, with what must run once it completes (Avg's division, an in-place
// reduce_scatter's move, a received message's length check). Internal to comm/.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_progress.h"

namespace tripod::mpi_ops {

void mpi_check(int code, const std::string& what);  // fails with MPI's error string unless MPI_SUCCESS
MPI_Datatype mpi_type(DType dtype);
MPI_Op mpi_op(ReduceOp op);  // Avg is Sum on the wire and a division afterwards
// Whether an operation was left in flight by an error (MpiRequest's destructor while unwinding):
// MPI may still progress it, so its communicator must not be freed (Open MPI's progress of a
// pending non-blocking collective on a freed communicator faults: a SIGSEGV where the error
// should have been reported).
bool operations_abandoned();
void note_abandoned_operation();
int mpi_count(int64_t elements, const std::string& what);  // MPI's int count, or an error naming `what`

// One started MPI operation: one MPI request, or several issued together (a reduce_scatter made of
// one reduce per block). A non-blocking one holds the call (so the tensors' storage outlives the
// transfer); any may hold a finishing step run once on completion: Avg's division, moving an
// in-place reduce_scatter result to its block, checking a received message's length.
class MpiRequest final : public CommRequest {
 public:
  // Named after `comm`'s where() only when a message needs it, and a blocking call's tensors are
  // the caller's until it returns: on a small call this layer's own cost dominates (an 8-byte
  // all-reduce of 2 ranks took 1.70 us with both done eagerly, 1.2 us without; bare MPI 0.41 us).
  MpiRequest(const Communicator& comm, const CommCall& call, bool blocking) : comm_(&comm), op_(call.op) {
    if (!blocking) call_ = call;
  }
  ~MpiRequest() override {
    if (done_ || requests_.empty() || !MpiRuntime::initialized()) return;
    untrack();  // not waited for: the progress thread need not go on for it
    if (std::uncaught_exceptions() > 0) {
      // Unwinding from an error: the peer this operation waits for may itself wait for us, so a
      // wait here could hang the job before the error is reported and the ranks aborted. Leave the
      // operation to MPI and keep alive what it may still touch: the call's tensors, this request's
      // own staging copy and (operations_abandoned) the communicator (a deliberate leak: the
      // process is failing, or conform goes on to its next layout).
      new CommCall(std::move(call_));
      new std::vector<char>(std::move(scratch_));
      note_abandoned_operation();
      return;
    }
    for (MPI_Request& request : requests_) MPI_Wait(&request, MPI_STATUS_IGNORE);
  }

  // One request at a time, with MPI_Wait/MPI_Test, not Waitall/Testall: under MPI_THREAD_MULTIPLE,
  // Open MPI 4.1.4's MPI_Waitall never returns for a receive that failed with MPI_ERR_TRUNCATE
  // (reproduced on bare MPI: an Isend of 7 floats to self, an Irecv of 5, MPI_Waitall). A request
  // that completed is null, and an earlier test() may have completed the first (a receive's status).
  void wait() override {
    for (std::size_t i = 0; i < requests_.size() && !done_; ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      MPI_Status status{};
      const int code = MPI_Wait(&requests_[i], &status);
      if (i == 0) first_status_ = status;
      if (code != MPI_SUCCESS) complete(code);
    }
    if (!done_) complete(MPI_SUCCESS);
  }
  bool test() override {
    for (std::size_t i = 0; i < requests_.size() && !done_; ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      MPI_Status status{};
      int flag = 0;
      const int code = MPI_Test(&requests_[i], &flag, &status);
      if (code != MPI_SUCCESS) complete(code);
      if (!flag) return done_;
      if (i == 0) first_status_ = status;
    }
    if (!done_) complete(MPI_SUCCESS);
    return true;
  }

  std::string what() const { return comm_->where(op_); }
  // A slot for one more MPI request of this operation (blocking calls take none: wait() returns at once).
  // (MPI writes the handle before it returns, so a later slot may move the vector freely.)
  MPI_Request* handle() { return &requests_.emplace_back(MPI_REQUEST_NULL); }
  std::vector<char>& scratch() { return scratch_; }
  // Run once on completion, with the status of the first request (a receive's).
  void on_complete(std::function<void(const MPI_Status&)> finish) { finish_ = std::move(finish); }
  // A non-blocking operation now in flight: the progress thread (if any) advances it until done.
  void track() {
    if (requests_.empty() || !MpiProgress::instance()) return;
    tracked_ = true;
    MpiProgress::instance()->hold();
  }
  void untrack() {
    if (!tracked_) return;
    tracked_ = false;
    if (MpiProgress* progress = MpiProgress::instance()) progress->release();
  }

 private:
  void complete(int code) {
    done_ = true;
    untrack();
    if (code != MPI_SUCCESS) mpi_check(code, what());
    if (finish_) finish_(first_status_);
  }

  const Communicator* comm_;  // requests do not outlive their communicator (comm/communicator.h)
  CommOp op_;
  CommCall call_;  // (non-blocking calls)
  std::vector<MPI_Request> requests_;
  MPI_Status first_status_{};
  std::vector<char> scratch_;
  std::function<void(const MPI_Status&)> finish_;
  bool done_ = false;
  bool tracked_ = false;
};

// mpi_count and mpi_check for a request's operation: its name is built only for an error.
int mpi_count(int64_t elements, const MpiRequest& request);
void mpi_check(int code, const MpiRequest& request);

// One operation being issued: the call, the request that will own the transfer, and the group it
// runs in. `blocking` picks MPI's blocking algorithm (the request then completes at once). issue()
// returns MPI's error code; the finishing steps it sets capture values, never this struct, which
// does not outlive MpiCommunicator::start.
struct MpiIssue {
  const CommCall& call;
  MpiRequest& request;
  MPI_Comm comm;
  int rank, size;
  bool blocking;
  MPI_Datatype type;
  MPI_Op op;
  void* in;  // null when the call has no such tensor
  void* out;
};

// Issues s.call's operation (any CommOp) into s.request; returns MPI's error code.
int issue(const MpiIssue& s);

// A reduce_scatter of two ranks as one reduce per block, rooted at the rank that keeps it
// (mpi_ops.cpp says why): blocking, MPI_Reduce one after the other (`request` takes nothing);
// otherwise MPI_Ireduce into `request`.
int reduce_per_block(const void* in, void* out, bool in_place, int count, MPI_Datatype type, MPI_Op op,
                     MPI_Comm comm, int rank, int size, bool blocking, MpiRequest& request);

}  // namespace tripod::mpi_ops
