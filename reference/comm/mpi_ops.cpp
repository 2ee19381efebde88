#include "comm/mpi_ops.h"

#include <atomic>

#include <climits>
#include <cstring>

#include "core/error.h"

namespace tripod::mpi_ops {

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

namespace {
std::atomic<bool> abandoned{false};
}  // namespace

bool operations_abandoned() { return abandoned.load(); }
void note_abandoned_operation() { abandoned.store(true); }

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

int mpi_count(int64_t elements, const MpiRequest& request) {
  if (elements <= INT_MAX) return static_cast<int>(elements);
  return mpi_count(elements, request.what());
}
void mpi_check(int code, const MpiRequest& request) {
  if (code != MPI_SUCCESS) mpi_check(code, request.what());
}

namespace {

template <typename T>
void divide_all(T* p, int64_t n, int divisor) {
  for (int64_t i = 0; i < n; ++i) p[i] /= static_cast<T>(divisor);
}

void divide_by(const Tensor& t, int divisor) {
  if (t.dtype() == DType::F32) divide_all(t.data<float>(), t.numel(), divisor);
  if (t.dtype() == DType::F64) divide_all(t.data<double>(), t.numel(), divisor);
}

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

}  // namespace

// A reduce_scatter of two ranks as two reduces, one per block, rooted at the rank that keeps it,
// issued in block order on both. Open MPI 4.1's MPI_Ireduce_scatter_block reduces the whole input
// to rank 0 (binomial) and scatters from there: rank 0 adds both blocks while the other waits, and
// half the data crosses twice. Two reduces are a ring: each rank adds one block. Measured with
// microbench/bare_nonblocking_reductions.cpp (README: Benchmarks): 0.44-0.88x the time from 2 to
// 32 MiB at two ranks; at four ranks on two cores it was 1.06-1.22x slower except at 16 MiB, so
// from three ranks on the library's algorithm stays. The blocking MPI_Reduce_scatter_block was
// slower still, whichever of its four tuned algorithms (~1 GB/s from 1 MiB): a blocking call is
// two blocking MPI_Reduce, a non-blocking one two MPI_Ireduce on libnbc's binomial tree
// (comm/mpi_algorithms.h; `bench comm reduce_scatter`, README). The bits are the library's: with two
// contributions a + b is b + a. `in` holds size blocks of `count`; in place, `out` is this rank's
// block of it.
int reduce_per_block(const void* in, void* out, bool in_place, int count, MPI_Datatype type, MPI_Op op,
                     MPI_Comm comm, int rank, int size, bool blocking, MpiRequest& request) {
  int type_bytes = 0;
  MPI_Type_size(type, &type_bytes);
  const std::size_t block_bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(type_bytes);
  for (int root = 0; root < size; ++root) {
    const void* send = static_cast<const char*>(in) + static_cast<std::size_t>(root) * block_bytes;
    if (root == rank && in_place) send = MPI_IN_PLACE;
    void* recv = root == rank ? out : nullptr;
    const int code = blocking ? MPI_Reduce(send, recv, count, type, op, root, comm)
                              : MPI_Ireduce(send, recv, count, type, op, root, comm, request.handle());
    if (code != MPI_SUCCESS) return code;
  }
  return MPI_SUCCESS;
}

namespace {

int issue_reduce_scatter(const MpiIssue& s) {
  const int count = mpi_count(s.call.out.numel(), s.request);
  const bool avg = s.call.reduce == ReduceOp::Avg;
  if (s.size == 2) {
    const int code = reduce_per_block(s.in, s.out, s.call.in_place, count, s.type, s.op, s.comm, s.rank, s.size,
                                      s.blocking, s.request);
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

int issue(const MpiIssue& s) {
  switch (s.call.op) {
    case CommOp::AllReduce: return issue_allreduce(s);
    case CommOp::ReduceScatter: return issue_reduce_scatter(s);
    case CommOp::AllGather: return issue_allgather(s);
    case CommOp::Broadcast: return issue_broadcast(s);
    case CommOp::Reduce: return issue_reduce(s);
    case CommOp::AllToAll: return issue_alltoall(s);
    case CommOp::Send: return issue_send(s);
    case CommOp::Recv: return issue_recv(s);
    case CommOp::Barrier: return s.blocking ? MPI_Barrier(s.comm) : MPI_Ibarrier(s.comm, s.request.handle());
  }
  return MPI_SUCCESS;
}

}  // namespace tripod::mpi_ops
