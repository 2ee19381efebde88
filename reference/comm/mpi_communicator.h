// MPI backend of the Communicator: host tensors, one MPI_Comm per group. Debian's Open MPI is not
// CUDA-aware: device tensors reach it through comm/staged_communicator.h.
//
// Async forms use MPI's non-blocking operations (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Iallgather, MPI_Ibcast, MPI_Ireduce, MPI_Ialltoall, MPI_Isend/Irecv, MPI_Ibarrier) with
// MPI_IN_PLACE where in and out share memory; blocking forms use the blocking calls, because Open
// MPI serves the two from different components (coll/libnbc schedules vs coll/tuned algorithms).
//
// How overlap really progresses with Open MPI (4.1, as Debian ships it): there is no asynchronous
// progress thread. A non-blocking collective is a schedule of rounds (send, receive, reduce) and a
// round advances only while this process is inside some MPI call. Between calls, at most the
// messages already handed to the shared-memory or network transport move; the next round waits.
// So `auto r = comm.all_reduce_async(...)` followed by a long compute and then `r->wait()` mostly
// communicates inside wait(). Callers that want real overlap cut their compute into pieces and
// call `r->test()` between them (each test() drives the progress engine once); the bucketed
// gradient sync does exactly that between layers of the backward pass. NCCL, by contrast, runs
// collectives on the GPU and overlaps without help.
//
// Reductions larger than the chunk size (--mpi-chunk-mb) run as a sequence of smaller ones
// (comm/reduction_pieces.h): Open MPI's non-blocking reductions allocate temporaries as large as
// the whole message, twice over for reduce_scatter.
//
// MPI_THREAD_FUNNELED is requested: only the thread that initialised MPI may call these methods,
// including wait() and test(). Errors come back as tripod::Error (communicators are switched to
// MPI_ERRORS_RETURN) with MPI's own error string.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/reduction_pieces.h"

namespace tripod {

// Initialises MPI for the life of the object (MPI_Init_thread, FUNNELED or better) and finalises
// it in the destructor. If MPI was already initialised by someone else, it neither initialises
// nor finalises. All communicators must be destroyed before it.
class MpiRuntime {
 public:
  MpiRuntime();                          // no command-line arguments (Open MPI does not need them)
  MpiRuntime(int* argc, char*** argv);   // lets MPI strip its own arguments
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  static bool initialized();  // initialised and not yet finalised
  int thread_level() const { return thread_level_; }

 private:
  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
};

// 16 MiB: small enough that Open MPI's temporaries stay a fixed allowance (GPT-2's 154 MiB embedding
// bucket goes in ten pieces); no `small` or GPT-2 step measured slower with it (README: Memory that
// is really returned).
constexpr int64_t kDefaultMpiChunkBytes = int64_t{16} << 20;

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) unless it is MPI_COMM_WORLD or MPI_COMM_SELF.
  // all_reduce and reduce_scatter inputs over chunk_bytes go in pieces (0: never); split groups
  // inherit it.
  MpiCommunicator(MPI_Comm comm, std::string name, int64_t chunk_bytes = kDefaultMpiChunkBytes);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  MPI_Comm handle() const { return comm_; }

 protected:
  bool accepts(Device device) const override { return device == Device::Host; }
  bool can_reduce(DType) const override { return true; }  // bf16 through fp32 (start_bf16_reduction)
  std::unique_ptr<CommRequest> start(const CommCall& call, bool blocking) override;
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) const override;

 private:
  std::unique_ptr<CommRequest> start_whole(const CommCall& call, bool blocking, MPI_Comm comm);
  std::unique_ptr<CommRequest> start_bf16_reduction(const CommCall& call, bool blocking, MPI_Comm comm);
  std::unique_ptr<CommRequest> start_in_pieces(const CommCall& call, bool blocking);
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  int64_t chunk_bytes_;
  MPI_Comm piece_comm_ = MPI_COMM_NULL;      // for reductions in pieces, made when first needed
  std::shared_ptr<PieceQueue> piece_queue_;  // their order (comm/reduction_pieces.h)
};

// A private duplicate of MPI_COMM_WORLD named "mpi:world" (collective over all processes), so
// Tripod's traffic never matches messages of other code that uses MPI_COMM_WORLD.
std::unique_ptr<Communicator> mpi_world(int64_t chunk_bytes = kDefaultMpiChunkBytes);

}  // namespace tripod
