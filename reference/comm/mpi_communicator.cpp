#include "comm/mpi_communicator.h"

#include "comm/comm_watchdog.h"
#include "comm/mpi_algorithms.h"
#include "comm/mpi_ops.h"
#include "comm/mpi_progress.h"
#include "comm/reduction_pieces.h"
#include "core/bf16.h"
#include "core/host_memory.h"

#include <cstdlib>
#include <vector>

namespace tripod {

using mpi_ops::mpi_check;
using mpi_ops::mpi_count;
using mpi_ops::mpi_op;
using mpi_ops::mpi_type;
using mpi_ops::MpiIssue;
using mpi_ops::MpiRequest;

// ---- runtime ----

MpiRuntime::MpiRuntime() : MpiRuntime(nullptr, nullptr) {}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int already = 0;
  MPI_Initialized(&already);
  if (already) {
    MPI_Query_thread(&thread_level_);
  } else {
    prefer_nonblocking_algorithms();  // comm/mpi_algorithms.h: why
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
  // An operation an error left in flight may be on these: they stay (mpi_ops.h).
  if (mpi_ops::operations_abandoned()) return;
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
  const int code = mpi_ops::issue(issue);
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
      if (size_ == 2)  // (mpi_ops.cpp: two reduces, blocking or not)
        code = mpi_ops::reduce_per_block(wide_in, wide_out, false, count, MPI_FLOAT, op, comm, rank_, size_, blocking,
                                         *request);
      else if (blocking) code = MPI_Reduce_scatter_block(wide_in, wide_out, count, MPI_FLOAT, op, comm);
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
