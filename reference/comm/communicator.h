// Communicator: the one door through which every collective passes (DESIGN.md, invariant 5).
// Parallel code calls these operations on Tensors and never learns which library moves the bytes:
// MpiCommunicator (host buffers), SelfCommunicator (one process, no MPI), StagedCommunicator (a
// device's buffers through host copies, for an MPI that cannot read device memory), later NCCL.
//
// Which memory a collective gets: each communicator says which devices' tensors it moves
// (accepts); anything else is refused with the tensor named. Host tensors (core/host_memory.h)
// are accepted by every communicator, so reports and timings need no device round trip.
//
// Every operation has a blocking form and an `_async` form that returns a CommRequest; the
// blocking form computes what the async one followed by wait() does, but every rank must use the
// same form for one call (MPI matches a blocking collective with a blocking one only: one rank's
// all_reduce_async()->wait() against another's all_reduce() hangs). Wait for requests in the same
// order on every rank: an all_reduce or reduce_scatter larger than --mpi-chunk-mb moves in pieces,
// and a rank issues its next piece only inside its own wait (rank 0 waiting for it before a
// barrier, rank 1 after the barrier, deadlocks). No wait is endless: past the communication
// timeout (comm/comm_watchdog.h, default 300 s) the job ends with the operation, group and rank named. Requests keep their tensors' storage alive
// until they complete, so a caller may drop its own references early. Calls are collective over
// the group (except send/recv) and, as in MPI and NCCL, every member must issue the same
// collectives in the same order.
//
// Arguments are checked here, locally and identically for every backend, before any backend is
// called: a mismatch throws tripod::Error naming the operation, the group, this rank and the
// sizes, instead of hanging or corrupting memory inside the library.
//
// Sizes (n = size(), all tensors contiguous, same dtype in and out):
//   all_reduce      in: k            out: k          (in and out the same tensor = in place)
//   reduce_scatter  in: n*k          out: k          rank r gets the reduction of block r;
//                   out may be in's own block r (in place; in's other blocks are then clobbered)
//   all_gather      in: k            out: n*k        block r comes from rank r;
//                   in may be out's own block r (in place)
//   broadcast       t: k on every rank, root's values everywhere
//   reduce          in: k            out: k          out is written on the root only
//   all_to_all      in: n*k          out: n*k        block j of rank i goes to block i of rank j
//   send / recv     t: k, equal on both sides; tags 0..32767 (the least MPI promises)
// k may be 0 everywhere. ReduceOp::Avg is Sum followed by division by size(), floating dtypes only.
// bf16 reduces in fp32 (each contribution widened exactly, the partial sums in fp32, the result
// rounded once to bf16 to nearest even). Max and Min of a NaN follow MPI's (a > b ? a : b): whether
// the NaN survives depends on its rank and the algorithm, so callers that must see one check
// finiteness themselves (the trainer's loss, a sum, does).
#pragma once
#include <memory>
#include <string>

#include "core/tensor.h"

namespace tripod {

enum class ReduceOp { Sum, Avg, Max, Min };
std::string reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"

// A started operation. wait() blocks until it is complete (then the output tensors hold the
// result); test() makes progress and says whether it is complete. Both may be called again after
// completion. Destroying an incomplete request waits for it, because the library may still be
// writing into its buffers. Call them from the thread that started the operation, and let no
// request outlive its communicator.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};

// What a backend is asked to do, after the arguments were checked.
enum class CommOp { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AllToAll, Send, Recv, Barrier };
std::string comm_op_name(CommOp op);  // "all_reduce", ...

struct CommCall {
  CommOp op = CommOp::Barrier;
  Tensor in;   // broadcast, send and recv: the one tensor, in == out
  Tensor out;
  ReduceOp reduce = ReduceOp::Sum;
  int peer = 0;  // root of broadcast/reduce, peer of send/recv
  int tag = 0;
  bool in_place = false;  // in and out share memory as described in the table above
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // e.g. "mpi:world/dp", used in error messages

  // Collective over this group: members with the same color form a new group, ordered by key
  // (ties by current rank), like MPI_Comm_split. A negative color joins no group: nullptr.
  std::unique_ptr<Communicator> split(int color, int key) const;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) const;

  void all_reduce(const Tensor& in, const Tensor& out, ReduceOp op);
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op);
  void all_gather(const Tensor& in, const Tensor& out);
  void broadcast(const Tensor& t, int root);
  void reduce(const Tensor& in, const Tensor& out, ReduceOp op, int root);
  void all_to_all(const Tensor& in, const Tensor& out);
  void send(const Tensor& t, int peer, int tag);
  void recv(const Tensor& t, int peer, int tag);
  void barrier();

  std::unique_ptr<CommRequest> all_reduce_async(const Tensor& in, const Tensor& out, ReduceOp op);
  std::unique_ptr<CommRequest> reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op);
  std::unique_ptr<CommRequest> all_gather_async(const Tensor& in, const Tensor& out);
  std::unique_ptr<CommRequest> broadcast_async(const Tensor& t, int root);
  std::unique_ptr<CommRequest> reduce_async(const Tensor& in, const Tensor& out, ReduceOp op, int root);
  std::unique_ptr<CommRequest> all_to_all_async(const Tensor& in, const Tensor& out);
  std::unique_ptr<CommRequest> send_async(const Tensor& t, int peer, int tag);
  std::unique_ptr<CommRequest> recv_async(const Tensor& t, int peer, int tag);
  std::unique_ptr<CommRequest> barrier_async();

  // "all_reduce on mpi:world (rank 1 of 4)": the prefix of every error message.
  std::string where(CommOp op) const;

 protected:
  // Which tensors the backend can move, and which dtypes it can reduce (checked before start).
  virtual bool accepts(Device device) const = 0;
  virtual bool can_reduce(DType dtype) const = 0;
  // Starts a checked call. `blocking` says the caller will wait at once, so a backend may use a
  // blocking primitive (Open MPI's blocking collectives use other, tuned algorithms) and return
  // a request that is already complete.
  virtual std::unique_ptr<CommRequest> start(const CommCall& call, bool blocking) = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) const = 0;
  // True for a backend whose waits poll and enforce comm_timeout_seconds() themselves (NCCL, which
  // can abort its communicator and throw); the others are watched by comm/comm_watchdog.h.
  virtual bool times_out_itself() const { return false; }

 private:
  std::unique_ptr<CommRequest> submit(CommCall call, bool blocking);
  void validate(CommCall& call) const;
};

// A request that completed when it was made (blocking calls, single-process copies).
class CompletedRequest final : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace tripod
