#include "comm/nccl/nccl_communicator.h"

#include <cstring>
#include <exception>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "comm/comm_watchdog.h"
#include "comm/nccl/nccl_group.h"
#include "comm/reissue.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace tripod {
namespace {

using nccl::NcclGroup;

// The end of a batch of NCCL work on a group's stream, and what runs once it is reached.
struct Completion {
  cudaEvent_t done = nullptr;
  std::vector<Tensor> keep;              // storage in use by the operation until it completes
  std::vector<std::function<void()>> finish;  // on the compute stream, after it waits for `done`
  bool finished = false;
  ~Completion() {
    if (done) cudaEventDestroy(done);
  }
};

class NcclCommunicator;

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(NcclCommunicator& comm, NcclGroup& group, std::shared_ptr<Completion> completion, std::string what)
      : comm_(comm), group_(group), completion_(std::move(completion)), what_(std::move(what)) {}
  ~NcclRequest() override;
  void wait() override;
  bool test() override;

 private:
  NcclCommunicator& comm_;
  NcclGroup& group_;  // the NCCL communicator the operation runs on
  std::shared_ptr<Completion> completion_;
  std::string what_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, ncclComm_t comm, cuda::CudaBackend& backend)
      : host_(std::move(host)), backend_(backend), name_(nccl_name(host_->name())),
        group_(std::make_unique<NcclGroup>(comm, name_)) {
    int nccl_rank = -1;
    group_->check(ncclCommUserRank(comm, &nccl_rank), name_ + ": ncclCommUserRank");
    TRIPOD_CHECK(nccl_rank == host_->rank(), name_, ": NCCL rank ", nccl_rank, " differs from the MPI rank ",
                 host_->rank());
    connect();
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return name_; }

  void await(NcclGroup& group, Completion& c, const std::string& what) {
    if (c.finished) return;
    group.await(c.done, what);
    finish(c);
  }
  bool poll(NcclGroup& group, Completion& c, const std::string& what) {
    if (c.finished) return true;
    if (!group.poll(c.done, what)) return false;
    finish(c);
    return true;
  }

 protected:
  bool accepts(Device device) const override { return device == Device::Host || device == Device::Cuda; }
  bool can_reduce(DType) const override { return true; }
  bool times_out_itself() const override { return true; }
  std::unique_ptr<CommRequest> start(const CommCall& call, bool blocking) override;
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) const override;

 private:
  static std::string nccl_name(const std::string& mpi_name) {
    return "nccl:" + (mpi_name.rfind("mpi:", 0) == 0 ? mpi_name.substr(4) : mpi_name);
  }
  cudaStream_t compute() const { return backend_.context().stream; }

  // Orders the group's stream after the compute issued so far.
  std::shared_ptr<Completion> begin(NcclGroup& group, const char* what) {
    auto c = std::make_shared<Completion>();
    cudaEvent_t ready = nullptr;
    NcclGroup::check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), name_ + ": cudaEventCreate");
    NcclGroup::check_cuda(cudaEventRecord(ready, compute()), name_ + ": " + what);
    NcclGroup::check_cuda(cudaStreamWaitEvent(group.stream(), ready, 0), name_ + ": " + what);
    cudaEventDestroy(ready);  // destroying a recorded event is safe: the wait already holds it
    NcclGroup::check_cuda(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), name_ + ": cudaEventCreate");
    return c;
  }
  void end(NcclGroup& group, Completion& c) {
    NcclGroup::check_cuda(cudaEventRecord(c.done, group.stream()), name_ + ": cudaEventRecord");
  }
  void finish(Completion& c) {
    if (c.finished) return;
    c.finished = true;
    NcclGroup::check_cuda(cudaStreamWaitEvent(compute(), c.done, 0), name_ + ": cudaStreamWaitEvent");
    for (auto& step : c.finish) step();
    c.keep.clear();
  }

  std::unique_ptr<CommRequest> start_collective(const CommCall& call, bool blocking);
  std::unique_ptr<CommRequest> start_p2p(const CommCall& call, bool blocking);
  NcclGroup& sender_group(int sender);
  void connect_senders();
  void connect();
  void connect_pairs(float* element, const std::string& what);

  std::unique_ptr<Communicator> host_;
  cuda::CudaBackend& backend_;
  std::string name_;
  std::unique_ptr<NcclGroup> group_;
  // Point-to-point: one communicator per sender, made on the first send or receive.
  std::vector<std::unique_ptr<NcclGroup>> senders_;
};

// Leaves `tensors` allocated for good: memory an abandoned NCCL operation may still write must
// not go back to the pool for another tensor (the job is ending; the leak is the safe side).
void abandon(std::vector<Tensor>& tensors) { static_cast<void>(new std::vector<Tensor>(std::move(tensors))); }

NcclRequest::~NcclRequest() {
  if (completion_->finished) return;
  if (std::uncaught_exceptions() > 0) {  // abandoned in flight by an error: stop it, keep its memory
    group_.abort_quietly();
    abandon(completion_->keep);
    return;
  }
  try {
    wait();
  } catch (...) {  // a destructor must not throw; the error was the caller's to see in wait()
  }
}

void NcclRequest::wait() { comm_.await(group_, *completion_, what_); }
bool NcclRequest::test() { return comm_.poll(group_, *completion_, what_); }

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    default: return ncclSum;  // Avg: a sum, then a scaling on the compute stream
  }
}

bool is_reduction(CommOp op) { return op == CommOp::AllReduce || op == CommOp::ReduceScatter || op == CommOp::Reduce; }

std::unique_ptr<CommRequest> NcclCommunicator::start(const CommCall& call, bool blocking) {
  // Host tensors and barriers go through the group's MPI communicator.
  if (call.op == CommOp::Barrier || call.in.on_host()) {
    // A barrier also waits for this rank's compute stream, but not for NCCL operations in flight:
    // those may be receives posted ahead that the peer serves only after the barrier.
    if (call.op == CommOp::Barrier) backend_.synchronize();
    return reissue(*host_, call, /*blocking=*/true);
  }
  if (call.op == CommOp::Send || call.op == CommOp::Recv) return start_p2p(call, blocking);
  return start_collective(call, blocking);
}

std::unique_ptr<CommRequest> NcclCommunicator::start_collective(const CommCall& call, bool blocking) {
  const std::string what = where(call.op);
  Backend& dev = backend_;
  const int n = size(), me = rank();
  // bf16 reductions in fp32: widen into scratch on the compute stream, round back after.
  const bool widen = is_reduction(call.op) && call.in.dtype() == DType::BF16;
  Tensor in = call.in.reshape({call.in.numel()}), out = call.out.reshape({call.out.numel()});
  Tensor result = out;  // what the caller reads
  if (widen) {
    Tensor wide_in = dev.alloc({in.numel()}, DType::F32);
    dev.convert(in, wide_in);
    Tensor wide_out = call.in_place ? (call.op == CommOp::ReduceScatter ? wide_in.view(me * out.numel(), {out.numel()}) : wide_in)
                                    : dev.alloc({out.numel()}, DType::F32);
    in = wide_in;
    out = wide_out;
  } else if (call.op == CommOp::AllToAll && call.in_place) {
    Tensor copy = dev.alloc({in.numel()}, in.dtype());  // every block is read and written at once
    dev.copy(in, copy);
    in = copy;
  }
  auto completion = begin(*group_, comm_op_name(call.op).c_str());
  completion->keep = {call.in, call.out, in, out};
  const ncclDataType_t type = nccl::nccl_dtype(in.dtype());
  const ncclRedOp_t op = nccl_op(call.reduce);
  ncclComm_t c = group_->comm();
  cudaStream_t s = group_->stream();
  const void* send = in.device_raw();
  void* recv = out.device_raw();
  ncclResult_t r = ncclSuccess;
  {
    CommWaitScope scope(what);  // a first connection blocks on the host
    switch (call.op) {
      case CommOp::AllReduce: r = ncclAllReduce(send, recv, out.numel(), type, op, c, s); break;
      case CommOp::ReduceScatter: r = ncclReduceScatter(send, recv, out.numel(), type, op, c, s); break;
      case CommOp::AllGather: r = ncclAllGather(send, recv, in.numel(), type, c, s); break;
      case CommOp::Broadcast: r = ncclBroadcast(send, recv, in.numel(), type, call.peer, c, s); break;
      case CommOp::Reduce: r = ncclReduce(send, recv, out.numel(), type, op, call.peer, c, s); break;
      case CommOp::AllToAll: {
        const size_t block = static_cast<size_t>(in.numel() / n), bytes = block * dtype_size(in.dtype());
        r = ncclGroupStart();
        for (int peer = 0; peer < n && r == ncclSuccess; ++peer) {
          r = ncclSend(static_cast<const char*>(send) + peer * bytes, block, type, peer, c, s);
          if (r == ncclSuccess) r = ncclRecv(static_cast<char*>(recv) + peer * bytes, block, type, peer, c, s);
        }
        const ncclResult_t ended = ncclGroupEnd();
        if (r == ncclSuccess) r = ended;
        break;
      }
      default: fail(what, ": not a collective");
    }
  }
  group_->check(r, what);
  end(*group_, *completion);
  const bool writes_result = call.op != CommOp::Reduce || me == call.peer;
  if (writes_result && call.reduce == ReduceOp::Avg && is_reduction(call.op))
    completion->finish.push_back([&dev, out, n] { dev.scale(out, 1.0 / n); });
  if (widen && writes_result) completion->finish.push_back([&dev, out, result] { dev.convert(out, result); });
  auto request = std::make_unique<NcclRequest>(*this, *group_, completion, what);
  if (blocking) request->wait();
  return request;
}

NcclGroup& NcclCommunicator::sender_group(int sender) {
  if (senders_.empty()) {
    // Collective over the group: every member makes them at its first send or receive, in the
    // same order (a pipeline's ranks all send and receive).
    const std::string what = name_ + ": ncclCommSplit (one communicator per sender)";
    try {
      CommWaitScope scope(what);
      for (int k = 0; k < size(); ++k) {
        ncclComm_t dup = nullptr;
        group_->check(ncclCommSplit(group_->comm(), 0, rank(), &dup, nullptr), what);
        senders_.push_back(std::make_unique<NcclGroup>(dup, str_cat(name_, " (sends of rank ", k, ")")));
      }
      connect_senders();
    } catch (...) {
      // A half-made set must not stay: a later send would index past its end. Its communicators
      // go aborted (note_failure), not destroyed.
      NcclGroup::note_failure();
      senders_.clear();
      throw;
    }
  }
  return *senders_[static_cast<std::size_t>(sender)];
}

// NCCL connects a pair at its first send or receive between them on a communicator, and that call
// waits on the host until the peer makes its own first call there. A pipeline's first calls are
// receives posted ahead on different sender communicators (stage 0 from rank 1 on senders_[1],
// stage 1 from rank 0 on senders_[0]): each would wait for the other forever. So every rank sends
// one element to every other on its own sender communicator, and receives one from every other on
// theirs, all in one group: NCCL sets up the connections of a group together.
void NcclCommunicator::connect_senders() {
  const int n = size();
  if (n == 1) return;
  const std::string what = name_ + ": connecting every pair of the sender communicators";
  std::vector<Tensor> ping{backend_.alloc({n}, DType::F32)};  // element k: from rank k (this rank's: sent)
  auto* element = static_cast<float*>(ping[0].device_raw());
  try {
    connect_pairs(element, what);
  } catch (...) {  // the pings may be in flight: stop them and keep their memory
    for (auto& g : senders_) g->abort_quietly();
    abandon(ping);
    throw;
  }
}

// NCCL connects a communicator's ranks and allocates its buffers at its first collective (runtime
// connection, the default since NCCL 2.22), with cudaMalloc/cuMem, outside the backend's memory
// pool, which keeps what it has freed. The first collective of a training run comes after the
// first forward and backward, when the pool holds a step's activations: NCCL's allocation could
// then fail for want of memory the pool does not use. So each communicator runs one collective of
// one element when it is made, before training allocates, and a failure to connect shows here,
// named, not in the middle of a step. Its sum (the group's size) checks the plumbing too.
void NcclCommunicator::connect() {
  const Tensor one = backend_.alloc({1}, DType::F32);
  backend_.fill(one, 1.0);
  all_reduce(one, one, ReduceOp::Sum);
  float sum = 0;
  backend_.download(one, &sum);
  check(sum == static_cast<float>(size()), name_, ": the first all_reduce (1.0 from each of ", size(),
        " ranks) gave ", sum, " on rank ", rank());
}

void NcclCommunicator::connect_pairs(float* element, const std::string& what) {
  const int n = size(), me = rank();
  std::vector<std::shared_ptr<Completion>> completions;
  for (auto& g : senders_) completions.push_back(begin(*g, "connect"));
  ncclResult_t r = ncclSuccess;
  {
    CommWaitScope scope(what);  // the connections block on the host
    r = ncclGroupStart();
    for (int k = 0; k < n && r == ncclSuccess; ++k) {
      NcclGroup& g = *senders_[static_cast<std::size_t>(k)];
      for (int peer = 0; peer < n && r == ncclSuccess; ++peer) {
        if (k == me && peer != me) r = ncclSend(element + me, 1, ncclFloat, peer, g.comm(), g.stream());
        if (k != me && peer == me) r = ncclRecv(element + k, 1, ncclFloat, k, g.comm(), g.stream());
      }
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (r == ncclSuccess) r = ended;
  }
  group_->check(r, what);
  for (std::size_t k = 0; k < senders_.size(); ++k) end(*senders_[k], *completions[k]);
  for (std::size_t k = 0; k < senders_.size(); ++k) await(*senders_[k], *completions[k], what);
}

std::unique_ptr<CommRequest> NcclCommunicator::start_p2p(const CommCall& call, bool blocking) {
  const bool send = call.op == CommOp::Send;
  const std::string what = where(call.op);
  NcclGroup& group = sender_group(send ? rank() : call.peer);
  auto completion = begin(group, send ? "send" : "recv");
  completion->keep = {call.in};
  const Tensor& t = call.in;
  const auto count = static_cast<size_t>(t.numel());
  const ncclDataType_t type = nccl::nccl_dtype(t.dtype());
  ncclResult_t r = ncclSuccess;
  {
    CommWaitScope scope(what);  // a first connection to the peer blocks on the host
    r = send ? ncclSend(t.device_raw(), count, type, call.peer, group.comm(), group.stream())
             : ncclRecv(t.device_raw(), count, type, call.peer, group.comm(), group.stream());
  }
  group.check(r, what);
  end(group, *completion);
  auto request = std::make_unique<NcclRequest>(*this, group, completion, what);
  if (blocking) request->wait();
  return request;
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key, const std::string& name) const {
  std::unique_ptr<Communicator> host = host_->split(color, key, name);
  ncclComm_t sub = nullptr;
  {
    const std::string what = name_ + ": ncclCommSplit";
    CommWaitScope scope(what);
    group_->check(ncclCommSplit(group_->comm(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr), what);
  }
  if (!host) return nullptr;
  return std::make_unique<NcclCommunicator>(std::move(host), sub, backend_);
}

}  // namespace

std::unique_ptr<Communicator> nccl_world(std::unique_ptr<Communicator> mpi_world, Backend& backend) {
  auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend);
  check(cuda_backend != nullptr, "--comm nccl needs the CUDA backend (this run's backend is '", backend.name(), "')");
  // The unique id travels as 32 int32 host elements (128 bytes) over MPI.
  ncclUniqueId id{};
  static_assert(sizeof id % sizeof(int32_t) == 0, "ncclUniqueId is a whole number of int32");
  Tensor wire = host_alloc({static_cast<int64_t>(sizeof id / sizeof(int32_t))}, DType::I32);
  if (mpi_world->rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) fail("ncclGetUniqueId: NCCL ", ncclGetErrorString(r));
    std::memcpy(wire.raw(), &id, sizeof id);
  }
  mpi_world->broadcast(wire, 0);
  std::memcpy(&id, wire.raw(), sizeof id);
  ncclComm_t comm = nullptr;
  {
    const std::string what = "ncclCommInitRank of nccl:world";
    CommWaitScope scope(what);
    const ncclResult_t r = ncclCommInitRank(&comm, mpi_world->size(), id, mpi_world->rank());
    if (r != ncclSuccess) fail(what, " (rank ", mpi_world->rank(), " of ", mpi_world->size(), "): NCCL ",
                               ncclGetErrorString(r), " (", ncclGetLastError(nullptr), ")");
  }
  return std::make_unique<NcclCommunicator>(std::move(mpi_world), comm, *cuda_backend);
}

std::string nccl_version_text() {
  // NCCL_VERSION_CODE = major * 10000 + minor * 100 + patch since 2.9.
  const auto text = [](int code) {
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
  };
  int loaded = 0;
  if (ncclGetVersion(&loaded) != ncclSuccess) return "unknown (ncclGetVersion failed)";
  return "NCCL " + text(loaded) + (loaded == NCCL_VERSION_CODE ? "" : " (built against " + text(NCCL_VERSION_CODE) + ")");
}

}  // namespace tripod
