#include "comm/mpi_communicator.h"

#include "comm/comm_watchdog.h"
#include "comm/mpi_algorithms.h"
#include "comm/mpi_progress.h"
#include "comm/reduction_pieces.h"
#include "core/bf16.h"
#include "core/host_memory.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <vector>

namespace tripod {

namespace {

void mpi_check(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(what, ": MPI error: ", std::string(text, static_cast<std::size_t>(length)));
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::BF16: return MPI_UINT16_T;  // moved as raw bits; reduced through fp32 (start_bf16_reduction)
  }
  return MPI_BYTE;
}

// Avg is Sum on the wire and a division afterwards.
MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    default: return MPI_SUM;
  }
}

int mpi_count(int64_t elements, const std::string& what) {
  check(elements <= INT_MAX, what, ": ", elements, " elements exceed MPI's int count (split the tensor)");
  return static_cast<int>(elements);
}

template <typename T>
void divide_all(T* p, int64_t n, int divisor) {
  for (int64_t i = 0; i < n; ++i) p[i] /= static_cast<T>(divisor);
}

void divide_by(const Tensor& t, int divisor) {
  if (t.dtype() == DType::F32) divide_all(t.data<float>(), t.numel(), divisor);
  if (t.dtype() == DType::F64) divide_all(t.data<double>(), t.numel(), divisor);
}

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
      // operation to MPI and keep its buffers alive (a deliberate leak: the process is failing).
      new CommCall(std::move(call_));
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
int mpi_count(int64_t elements, const MpiRequest& request) {
  if (elements <= INT_MAX) return static_cast<int>(elements);
  return mpi_count(elements, request.what());
}
void mpi_check(int code, const MpiRequest& request) {
  if (code != MPI_SUCCESS) mpi_check(code, request.what());
}

// One operation being issued: the call, the request that will own the transfer, and the group it
// runs in. `blocking` picks MPI's blocking algorithm (the request then completes at once). The
// issue_* helpers below return MPI's error code; their finishing steps capture values, never this
// struct, which does not outlive MpiCommunicator::start.
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

// Avg's division, once the summed result has arrived.
void divide_on_complete(MpiRequest& request, const Tensor& result, int group_size) {
  request.on_complete([=](const MPI_Status&) { divide_by(result, group_size); });
}

int issue_allreduce(const MpiIssue& s) {
  const int count = mpi_count(s.call.out.numel(), s.request);
  const void* send = s.call.in_place ? MPI_IN_PLACE : s.in;
  const int code = s.blocking ? MPI_Allreduce(send, s.out, count, s.type, s.op, s.comm)
                              : MPI_Iallreduce(send, s.out, count, s.type, s.op, s.comm, s.request.handle());
  if (s.call.reduce == ReduceOp::Avg) divide_on_complete(s.request, s.call.out, s.size);
  return code;
}

// A non-blocking reduce_scatter of two ranks as two MPI_Ireduce, one per block, rooted at the rank
// that keeps it, issued in block order on both. Open MPI 4.1's MPI_Ireduce_scatter_block reduces
// the whole input to rank 0 (binomial) and scatters from there: rank 0 adds both blocks while the
// other waits, and half the data crosses twice. Two reduces are a ring: each rank adds one block.
// Measured with microbench/bare_nonblocking_reductions.cpp (README: Benchmarks): 0.44-0.88x the
// time from 2 to 32 MiB at two ranks; at four ranks on two cores it was 1.06-1.22x slower except
// at 16 MiB, so from three ranks on the library's algorithm stays. The bits are the library's:
// with two contributions a + b is b + a. `in` holds size blocks of `count`; in place, `out` is
// this rank's block of it.
int ireduce_per_block(const void* in, void* out, bool in_place, int count, MPI_Datatype type, MPI_Op op,
                      MPI_Comm comm, int rank, int size, MpiRequest& request) {
  int type_bytes = 0;
  MPI_Type_size(type, &type_bytes);
  const std::size_t block_bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(type_bytes);
  for (int root = 0; root < size; ++root) {
    const void* send = static_cast<const char*>(in) + static_cast<std::size_t>(root) * block_bytes;
    if (root == rank && in_place) send = MPI_IN_PLACE;
    const int code = MPI_Ireduce(send, root == rank ? out : nullptr, count, type, op, root, comm, request.handle());
    if (code != MPI_SUCCESS) return code;
  }
  return MPI_SUCCESS;
}

int issue_reduce_scatter(const MpiIssue& s) {
  const int count = mpi_count(s.call.out.numel(), s.request);
  const bool avg = s.call.reduce == ReduceOp::Avg;
  if (!s.blocking && s.size == 2) {
    const int code = ireduce_per_block(s.in, s.out, s.call.in_place, count, s.type, s.op, s.comm, s.rank, s.size,
                                       s.request);
    if (avg) divide_on_complete(s.request, s.call.out, s.size);
    return code;
  }
  // With MPI_IN_PLACE the whole input sits in the receive buffer and the result lands at its
  // start (block 0), so an in-place result is moved to this rank's block afterwards.
  const void* send = s.call.in_place ? MPI_IN_PLACE : s.in;
  void* recv = s.call.in_place ? s.in : s.out;
  const int code = s.blocking ? MPI_Reduce_scatter_block(send, recv, count, s.type, s.op, s.comm)
                              : MPI_Ireduce_scatter_block(send, recv, count, s.type, s.op, s.comm, s.request.handle());
  const bool move = s.call.in_place && s.rank != 0;
  if (move || avg) {
    s.request.on_complete([result = s.call.out, recv, move, avg, group_size = s.size](const MPI_Status&) {
      if (move) std::memmove(result.raw(), recv, result.bytes());
      if (avg) divide_by(result, group_size);
    });
  }
  return code;
}

int issue_allgather(const MpiIssue& s) {
  const int count = mpi_count(s.call.in.numel(), s.request);
  const void* send = s.call.in_place ? MPI_IN_PLACE : s.in;
  return s.blocking ? MPI_Allgather(send, count, s.type, s.out, count, s.type, s.comm)
                    : MPI_Iallgather(send, count, s.type, s.out, count, s.type, s.comm, s.request.handle());
}

int issue_broadcast(const MpiIssue& s) {
  const int count = mpi_count(s.call.in.numel(), s.request);
  return s.blocking ? MPI_Bcast(s.in, count, s.type, s.call.peer, s.comm)
                    : MPI_Ibcast(s.in, count, s.type, s.call.peer, s.comm, s.request.handle());
}

int issue_reduce(const MpiIssue& s) {
  // MPI_IN_PLACE is legal only at the root; other ranks send `in` and receive nothing.
  const bool root = s.rank == s.call.peer;
  const int count = mpi_count(s.call.in.numel(), s.request);
  const void* send = root && s.call.in_place ? MPI_IN_PLACE : s.in;
  void* recv = root ? s.out : nullptr;
  const int code = s.blocking ? MPI_Reduce(send, recv, count, s.type, s.op, s.call.peer, s.comm)
                              : MPI_Ireduce(send, recv, count, s.type, s.op, s.call.peer, s.comm, s.request.handle());
  if (s.call.reduce == ReduceOp::Avg && root) divide_on_complete(s.request, s.call.out, s.size);
  return code;
}

int issue_alltoall(const MpiIssue& s) {
  // In place: send from a private copy of the input (what Open MPI would do internally).
  const int count = mpi_count(s.call.in.numel() / s.size, s.request);
  const void* send = s.in;
  if (s.call.in_place) {
    const char* in = static_cast<const char*>(s.in);
    s.request.scratch().assign(in, in + s.call.in.bytes());
    send = s.request.scratch().data();
  }
  return s.blocking ? MPI_Alltoall(send, count, s.type, s.out, count, s.type, s.comm)
                    : MPI_Ialltoall(send, count, s.type, s.out, count, s.type, s.comm, s.request.handle());
}

int issue_send(const MpiIssue& s) {
  // Point-to-point has no separate blocking algorithm: always Isend, the caller waits.
  return MPI_Isend(s.in, mpi_count(s.call.in.numel(), s.request), s.type, s.call.peer, s.call.tag, s.comm,
                   s.request.handle());
}

int issue_recv(const MpiIssue& s) {
  const int count = mpi_count(s.call.out.numel(), s.request);
  const int code = MPI_Irecv(s.out, count, s.type, s.call.peer, s.call.tag, s.comm, s.request.handle());
  s.request.on_complete(
      [type = s.type, count, &request = s.request, peer = s.call.peer, tag = s.call.tag](const MPI_Status& status) {
        int received = 0;
        MPI_Get_count(&status, type, &received);
        if (received != count)
          fail(request.what(), ": expected ", count, " elements from rank ", peer, " (tag ", tag,
               ") but the message has ", received);
      });
  return code;
}

}  // namespace

// ---- runtime ----

MpiRuntime::MpiRuntime() : MpiRuntime(nullptr, nullptr) {}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int already = 0;
  MPI_Initialized(&already);
  if (already) {
    MPI_Query_thread(&thread_level_);
  } else {
    prefer_ring_allreduce();  // comm/mpi_algorithms.h: why
    // MULTIPLE for the optional progress thread (comm/mpi_progress.h; measured to cost 1-5 % on
    // an 8-rank conform here, within noise); FUNNELED is enough without it.
    mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_), "MPI_Init_thread");
    owns_ = true;
  }
  if (thread_level_ < MPI_THREAD_FUNNELED) {
    if (owns_) MPI_Finalize();  // the destructor will not run after a throwing constructor
    fail("MPI provides thread level ", thread_level_,
         " but Tripod needs MPI_THREAD_FUNNELED (OpenMP threads run between MPI calls)");
  }
}

MpiRuntime::~MpiRuntime() {
  MpiProgress::stop();
  if (owns_ && initialized()) MPI_Finalize();
}

bool MpiRuntime::initialized() {
  int init = 0, finalized = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&finalized);
  return init && !finalized;
}

// ---- communicator ----

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, int64_t chunk_bytes)
    : comm_(comm), name_(std::move(name)), chunk_bytes_(chunk_bytes) {
  check(chunk_bytes_ >= 0, "communicator ", name_, ": chunk size ", chunk_bytes_, " bytes is negative");
  check(MpiRuntime::initialized(), "communicator ", name_, ": MPI is not initialised (create an MpiRuntime first)");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  if (piece_comm_ != MPI_COMM_NULL && MpiRuntime::initialized()) MPI_Comm_free(&piece_comm_);
  if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF && MpiRuntime::initialized()) MPI_Comm_free(&comm_);
}

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key, const std::string& name) const {
  MPI_Comm sub = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), str_cat("split of ", name_));
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(sub, name, chunk_bytes_);
}

std::unique_ptr<CommRequest> MpiCommunicator::start(const CommCall& call, bool blocking) {
  // (reduce: only `bench comm` uses it, at the sizes its user asks for)
  const bool piecewise = call.op == CommOp::AllReduce || call.op == CommOp::ReduceScatter;
  if (piecewise && chunk_bytes_ > 0 && size_ > 1 && static_cast<int64_t>(call.in.bytes()) > chunk_bytes_)
    return start_in_pieces(call, blocking);
  return start_whole(call, blocking, comm_);
}

std::unique_ptr<CommRequest> MpiCommunicator::start_whole(const CommCall& call, bool blocking, MPI_Comm comm) {
  const bool reduction = call.op == CommOp::AllReduce || call.op == CommOp::ReduceScatter || call.op == CommOp::Reduce;
  if (reduction && call.in.dtype() == DType::BF16) return start_bf16_reduction(call, blocking, comm);
  auto request = std::make_unique<MpiRequest>(*this, call, blocking);
  void* in = call.in.defined() ? call.in.raw() : nullptr;  // a barrier has no tensors
  void* out = call.out.defined() ? call.out.raw() : nullptr;
  const MpiIssue issue{call, *request, comm, rank_, size_, blocking, mpi_type(call.in.dtype()), mpi_op(call.reduce),
                       in, out};
  int code = MPI_SUCCESS;
  switch (call.op) {
    case CommOp::AllReduce: code = issue_allreduce(issue); break;
    case CommOp::ReduceScatter: code = issue_reduce_scatter(issue); break;
    case CommOp::AllGather: code = issue_allgather(issue); break;
    case CommOp::Broadcast: code = issue_broadcast(issue); break;
    case CommOp::Reduce: code = issue_reduce(issue); break;
    case CommOp::AllToAll: code = issue_alltoall(issue); break;
    case CommOp::Send: code = issue_send(issue); break;
    case CommOp::Recv: code = issue_recv(issue); break;
    case CommOp::Barrier: code = blocking ? MPI_Barrier(comm) : MPI_Ibarrier(comm, request->handle()); break;
  }
  mpi_check(code, *request);
  if (!blocking) request->track();
  return request;
}

// bf16 has no MPI type that reduces: every rank widens its contribution to fp32 (exactly), MPI
// reduces fp32, and the result is rounded once to bf16 (nearest even) when the operation completes
// (after Avg's division). In-place calls need nothing special: the fp32 copies are separate.
std::unique_ptr<CommRequest> MpiCommunicator::start_bf16_reduction(const CommCall& call, bool blocking,
                                                                   MPI_Comm comm) {
  auto request = std::make_unique<MpiRequest>(*this, call, blocking);
  const std::string at = request->what();
  const int64_t n_in = call.in.numel(), n_out = call.out.numel();
  std::vector<char>& scratch = request->scratch();
  scratch.resize(static_cast<std::size_t>(n_in + n_out) * sizeof(float));
  float* wide_in = reinterpret_cast<float*>(scratch.data());
  float* wide_out = wide_in + n_in;
  const bf16* in = call.in.data<bf16>();
  for (int64_t i = 0; i < n_in; ++i) wide_in[i] = bf16_to_float(in[i]);
  const MPI_Op op = mpi_op(call.reduce);
  const bool writes_out = call.op != CommOp::Reduce || rank_ == call.peer;
  int code = MPI_SUCCESS;
  const int count = mpi_count(n_out, at);
  switch (call.op) {
    case CommOp::AllReduce:
      code = blocking ? MPI_Allreduce(wide_in, wide_out, count, MPI_FLOAT, op, comm)
                      : MPI_Iallreduce(wide_in, wide_out, count, MPI_FLOAT, op, comm, request->handle());
      break;
    case CommOp::ReduceScatter:
      if (blocking) code = MPI_Reduce_scatter_block(wide_in, wide_out, count, MPI_FLOAT, op, comm);
      else if (size_ == 2)
        code = ireduce_per_block(wide_in, wide_out, false, count, MPI_FLOAT, op, comm, rank_, size_, *request);
      else code = MPI_Ireduce_scatter_block(wide_in, wide_out, count, MPI_FLOAT, op, comm, request->handle());
      break;
    default:  // Reduce
      code = blocking ? MPI_Reduce(wide_in, writes_out ? wide_out : nullptr, count, MPI_FLOAT, op, call.peer, comm)
                      : MPI_Ireduce(wide_in, writes_out ? wide_out : nullptr, count, MPI_FLOAT, op, call.peer, comm,
                                    request->handle());
      break;
  }
  mpi_check(code, at);
  if (writes_out) {
    const Tensor result = call.out;
    const float divisor = call.reduce == ReduceOp::Avg ? static_cast<float>(size_) : 1.0f;
    request->on_complete([=](const MPI_Status&) {
      bf16* out = result.data<bf16>();
      for (int64_t i = 0; i < n_out; ++i) out[i] = float_to_bf16(divisor == 1.0f ? wide_out[i] : wide_out[i] / divisor);
    });
  }
  if (!blocking) request->track();
  return request;
}

// all_reduce and reduce_scatter over chunk_bytes_, one piece after another (comm/reduction_pieces.h)
// on a duplicate of this group's MPI_Comm made at the first such call (collective: every rank
// makes the same calls). Each piece is an ordinary call (bf16 included); reduce_scatter's pieces
// are packed into one staging buffer, reused, since only one piece is in flight.
std::unique_ptr<CommRequest> MpiCommunicator::start_in_pieces(const CommCall& call, bool blocking) {
  if (!piece_queue_) {
    mpi_check(MPI_Comm_dup(comm_, &piece_comm_), str_cat(name_, ": MPI_Comm_dup for reductions in pieces"));
    MPI_Comm_set_errhandler(piece_comm_, MPI_ERRORS_RETURN);
    piece_queue_ = std::make_shared<PieceQueue>();
  }
  const bool scatter = call.op == CommOp::ReduceScatter;
  const int64_t block = call.out.numel();
  const int ranks = scatter ? size_ : 1;
  std::vector<ReductionPiece> pieces = reduction_pieces(block, ranks, dtype_size(call.in.dtype()), chunk_bytes_);
  const std::size_t count = pieces.size();  // > 0: the input is larger than a chunk
  // The staging buffer is made when the sequence's first piece starts, not now: several large
  // reductions may wait in the queue, and it goes with the sequence when its last piece is done.
  auto staging = std::make_shared<Tensor>();
  auto start_piece = [this, call, pieces = std::move(pieces), staging, scatter, block, blocking](std::size_t j) {
    const ReductionPiece& piece = pieces[j];
    CommCall part = call;
    part.out = call.out.view(piece.first, {piece.length});
    if (scatter) {
      if (!staging->defined()) *staging = host_alloc({size_ * pieces.front().length}, call.in.dtype());
      pack_piece(call.in, block, size_, piece, *staging);
      part.in = staging->view(0, {size_ * piece.length});
      part.in_place = false;
    } else {
      part.in = call.in.view(piece.first, {piece.length});
    }
    return start_whole(part, blocking, piece_comm_);  // (one element per rank may still be over the size)
  };
  return std::make_unique<QueuedRequest>(piece_queue_, count, std::move(start_piece));
}

std::unique_ptr<Communicator> mpi_world(int64_t chunk_bytes) {
  check(MpiRuntime::initialized(), "mpi_world: MPI is not initialised (create an MpiRuntime first)");
  MPI_Comm dup = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "mpi_world: MPI_Comm_dup");
  auto world = std::make_unique<MpiCommunicator>(dup, "mpi:world", chunk_bytes);
  if (world->size() > 1) set_comm_process_label(str_cat("rank ", world->rank(), " of ", world->size()));
  return world;
}

}  // namespace tripod
