#include "comm/communicator.h"

#include <cstdint>

#include "comm/comm_watchdog.h"

namespace tripod {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

std::string comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::AllReduce: return "all_reduce";
    case CommOp::ReduceScatter: return "reduce_scatter";
    case CommOp::AllGather: return "all_gather";
    case CommOp::Broadcast: return "broadcast";
    case CommOp::Reduce: return "reduce";
    case CommOp::AllToAll: return "all_to_all";
    case CommOp::Send: return "send";
    case CommOp::Recv: return "recv";
    case CommOp::Barrier: return "barrier";
  }
  return "?";
}

namespace {

const char* begin_of(const Tensor& t) { return static_cast<const char*>(t.address()); }

bool overlap(const Tensor& a, const Tensor& b) {
  if (a.bytes() == 0 || b.bytes() == 0) return false;
  return begin_of(a) < begin_of(b) + b.bytes() && begin_of(b) < begin_of(a) + a.bytes();
}

// True when `part` is exactly block `index` (of part's size) of `whole`.
bool is_block(const Tensor& part, const Tensor& whole, int index) {
  return part.bytes() > 0 && begin_of(part) == begin_of(whole) + static_cast<std::size_t>(index) * part.bytes();
}

std::string elements(const Tensor& t) { return str_cat(t.numel(), " ", dtype_name(t.dtype()), " elements"); }

bool is_reduction(CommOp op) {
  return op == CommOp::AllReduce || op == CommOp::ReduceScatter || op == CommOp::Reduce;
}

}  // namespace

std::string Communicator::where(CommOp op) const {
  // Plain concatenation, not a stream: the MPI backend labels every request with this.
  return comm_op_name(op) + " on " + name() + " (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")";
}

void Communicator::validate(CommCall& call) const {
  // The message is built only on failure: a check costs nothing on the hot path.
  auto at = [&] { return where(call.op); };
  if (call.op == CommOp::Barrier) return;
  if (!(call.in.defined() && call.out.defined())) fail(at(), ": a tensor argument is undefined");
  for (const Tensor* t : {&call.in, &call.out})
    if (!(accepts(t->device()))) fail(at(), ": this communicator cannot move a ", t->describe(),
          " tensor (stage device memory through the host, see comm/staged_communicator.h)");
  if (!(call.in.device() == call.out.device())) fail(at(), ": in and out live on different devices");
  if (!(call.in.dtype() == call.out.dtype())) fail(at(), ": in has dtype ", dtype_name(call.in.dtype()),
        " but out has ", dtype_name(call.out.dtype()));
  if (is_reduction(call.op)) {
    const DType dt = call.in.dtype();
    if (!(can_reduce(dt))) fail(at(), ": cannot reduce ", dtype_name(dt), " tensors on this communicator");
    if (!(call.reduce != ReduceOp::Avg || dt != DType::I32)) fail(at(), ": avg needs a floating dtype, got ",
          dtype_name(dt));
  }
  const int64_t n = size();
  const Tensor& in = call.in;
  const Tensor& out = call.out;
  switch (call.op) {
    case CommOp::AllReduce:
    case CommOp::Reduce:
      if (!(in.numel() == out.numel())) fail(at(), ": in has ", elements(in), " but out has ", elements(out));
      call.in_place = in.bytes() > 0 && in.address() == out.address();
      if (!(call.in_place || !overlap(in, out))) fail(at(), ": in and out partly overlap");
      break;
    case CommOp::ReduceScatter:
      if (!(in.numel() == n * out.numel())) fail(at(), ": in has ", elements(in), " but needs size ", n, " x out's ",
            out.numel(), " = ", n * out.numel());
      call.in_place = is_block(out, in, rank());
      if (!(call.in_place || !overlap(in, out))) fail(at(), ": out overlaps in but is not in's block ", rank());
      break;
    case CommOp::AllGather:
      if (!(out.numel() == n * in.numel())) fail(at(), ": out has ", elements(out), " but needs size ", n, " x in's ",
            in.numel(), " = ", n * in.numel());
      call.in_place = is_block(in, out, rank());
      if (!(call.in_place || !overlap(in, out))) fail(at(), ": in overlaps out but is not out's block ", rank());
      break;
    case CommOp::AllToAll:
      if (!(in.numel() == out.numel())) fail(at(), ": in has ", elements(in), " but out has ", elements(out));
      if (!(in.numel() % n == 0)) fail(at(), ": ", elements(in), " do not split into ", n, " equal blocks");
      call.in_place = in.bytes() > 0 && in.address() == out.address();
      if (!(call.in_place || !overlap(in, out))) fail(at(), ": in and out partly overlap");
      break;
    default:  // broadcast, send, recv: one tensor
      break;
  }
  if (call.op == CommOp::Broadcast || call.op == CommOp::Reduce)
    if (!(call.peer >= 0 && call.peer < n)) fail(at(), ": root ", call.peer, " is not a rank of a group of ", n);
  if (call.op == CommOp::Send || call.op == CommOp::Recv) {
    if (!(call.peer >= 0 && call.peer < n)) fail(at(), ": peer ", call.peer, " is not a rank of a group of ", n);
    if (!(call.tag >= 0 && call.tag <= 32767)) fail(at(), ": tag ", call.tag, " is outside 0..32767");
  }
}

namespace {

// An asynchronous operation whose wait() is watched for the communication timeout
// (comm/comm_watchdog.h); test() never blocks and needs no watching.
class WatchedRequest final : public CommRequest {
 public:
  WatchedRequest(std::unique_ptr<CommRequest> inner, const Communicator& comm, CommOp op)
      : inner_(std::move(inner)), comm_(comm), op_(op) {}
  void wait() override {
    CommWaitScope scope(comm_, op_);
    inner_->wait();
  }
  bool test() override { return inner_->test(); }

 private:
  std::unique_ptr<CommRequest> inner_;
  const Communicator& comm_;  // requests do not outlive their communicator
  CommOp op_;
};

}  // namespace

std::unique_ptr<CommRequest> Communicator::submit(CommCall call, bool blocking) {
  validate(call);
  if (times_out_itself()) return start(call, blocking);
  if (!blocking) return std::make_unique<WatchedRequest>(start(call, false), *this, call.op);
  // A blocking call may block inside start() (MPI's blocking collectives) or in wait().
  CommWaitScope scope(*this, call.op);
  std::unique_ptr<CommRequest> request = start(call, true);
  request->wait();
  return request;
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) const {
  return do_split(color, key, str_cat(name(), "/", color));
}
std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) const {
  return do_split(color, key, name);
}

// ---- the public operations: build the call, check it, start it ----

namespace {
CommCall pair_call(CommOp op, const Tensor& in, const Tensor& out, ReduceOp reduce = ReduceOp::Sum, int peer = 0) {
  CommCall c;
  c.op = op;
  c.in = in;
  c.out = out;
  c.reduce = reduce;
  c.peer = peer;
  return c;
}
CommCall single_call(CommOp op, const Tensor& t, int peer, int tag = 0) {
  CommCall c = pair_call(op, t, t, ReduceOp::Sum, peer);
  c.tag = tag;
  return c;
}
}  // namespace

std::unique_ptr<CommRequest> Communicator::all_reduce_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  return submit(pair_call(CommOp::AllReduce, in, out, op), false);
}
std::unique_ptr<CommRequest> Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  return submit(pair_call(CommOp::ReduceScatter, in, out, op), false);
}
std::unique_ptr<CommRequest> Communicator::all_gather_async(const Tensor& in, const Tensor& out) {
  return submit(pair_call(CommOp::AllGather, in, out), false);
}
std::unique_ptr<CommRequest> Communicator::broadcast_async(const Tensor& t, int root) {
  return submit(single_call(CommOp::Broadcast, t, root), false);
}
std::unique_ptr<CommRequest> Communicator::reduce_async(const Tensor& in, const Tensor& out, ReduceOp op, int root) {
  return submit(pair_call(CommOp::Reduce, in, out, op, root), false);
}
std::unique_ptr<CommRequest> Communicator::all_to_all_async(const Tensor& in, const Tensor& out) {
  return submit(pair_call(CommOp::AllToAll, in, out), false);
}
std::unique_ptr<CommRequest> Communicator::send_async(const Tensor& t, int peer, int tag) {
  return submit(single_call(CommOp::Send, t, peer, tag), false);
}
std::unique_ptr<CommRequest> Communicator::recv_async(const Tensor& t, int peer, int tag) {
  return submit(single_call(CommOp::Recv, t, peer, tag), false);
}
std::unique_ptr<CommRequest> Communicator::barrier_async() { return submit(CommCall{}, false); }

void Communicator::all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) {
  submit(pair_call(CommOp::AllReduce, in, out, op), true)->wait();
}
void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  submit(pair_call(CommOp::ReduceScatter, in, out, op), true)->wait();
}
void Communicator::all_gather(const Tensor& in, const Tensor& out) {
  submit(pair_call(CommOp::AllGather, in, out), true)->wait();
}
void Communicator::broadcast(const Tensor& t, int root) { submit(single_call(CommOp::Broadcast, t, root), true)->wait(); }
void Communicator::reduce(const Tensor& in, const Tensor& out, ReduceOp op, int root) {
  submit(pair_call(CommOp::Reduce, in, out, op, root), true)->wait();
}
void Communicator::all_to_all(const Tensor& in, const Tensor& out) {
  submit(pair_call(CommOp::AllToAll, in, out), true)->wait();
}
void Communicator::send(const Tensor& t, int peer, int tag) { submit(single_call(CommOp::Send, t, peer, tag), true)->wait(); }
void Communicator::recv(const Tensor& t, int peer, int tag) { submit(single_call(CommOp::Recv, t, peer, tag), true)->wait(); }
void Communicator::barrier() { submit(CommCall{}, true)->wait(); }

}  // namespace tripod
