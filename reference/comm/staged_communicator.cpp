#include "comm/staged_communicator.h"

#include <exception>
#include <functional>

#include "comm/reissue.h"
#include "core/host_memory.h"

namespace tripod {
namespace {

// The host communicator's request, then the upload of the result into the device tensor.
class StagedRequest final : public CommRequest {
 public:
  StagedRequest(std::unique_ptr<CommRequest> host, std::function<void()> finish)
      : host_(std::move(host)), finish_(std::move(finish)) {}
  ~StagedRequest() override {
    // As every request, an abandoned one completes first; its result still reaches the device,
    // unless an error is unwinding the stack (then nothing more is done, see MpiRequest).
    if (done_ || std::uncaught_exceptions() > 0) return;
    try {
      wait();
    } catch (...) {  // a destructor must not throw; the error was the caller's to see in wait()
    }
  }
  void wait() override {
    if (done_) return;
    host_->wait();
    finish();
  }
  bool test() override {
    if (!done_ && host_->test()) finish();
    return done_;
  }

 private:
  void finish() {
    done_ = true;
    if (finish_) finish_();
  }
  std::unique_ptr<CommRequest> host_;
  std::function<void()> finish_;
  bool done_ = false;
};

Tensor flat(const Tensor& t) { return t.reshape({t.numel()}); }

}  // namespace

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, Backend& device)
    : host_(std::move(host)), device_(device) {
  check(host_ != nullptr, "StagedCommunicator: no host communicator");
}

StagedCommunicator::~StagedCommunicator() = default;

bool StagedCommunicator::accepts(Device device) const {
  return device == Device::Host || device == device_.device();
}

std::unique_ptr<Communicator> StagedCommunicator::do_split(int color, int key, const std::string& name) const {
  std::unique_ptr<Communicator> sub = host_->split(color, key, name);
  if (!sub) return nullptr;
  return std::make_unique<StagedCommunicator>(std::move(sub), device_);
}

std::unique_ptr<CommRequest> StagedCommunicator::start(const CommCall& call, bool blocking) {
  Communicator& h = *host_;
  // Host tensors (and barriers) need no staging: the host communicator takes the call as it is.
  if (call.op == CommOp::Barrier || call.in.on_host()) return reissue(h, call, blocking);

  Backend& dev = device_;
  auto download = [&](const Tensor& t) {
    Tensor host = host_alloc({t.numel()}, t.dtype());
    dev.download(t, host.raw());
    return host;
  };
  const Tensor in = flat(call.in), out = flat(call.out);
  const int me = h.rank();
  CommCall staged = call;  // the same operation on host buffers
  Tensor result;           // the host buffer whose contents `out` takes on completion (none: nothing to take)
  switch (call.op) {
    case CommOp::AllReduce:
    case CommOp::AllToAll:
    case CommOp::Reduce:
      staged.in = download(in);
      staged.out = call.in_place ? staged.in : host_alloc({out.numel()}, out.dtype());
      if (call.op != CommOp::Reduce || me == call.peer) result = staged.out;
      break;
    case CommOp::ReduceScatter:  // in place: out is block `me` of in
      staged.in = download(in);
      staged.out = call.in_place ? staged.in.view(me * out.numel(), {out.numel()}) : host_alloc({out.numel()}, out.dtype());
      result = staged.out;
      break;
    case CommOp::AllGather:  // in place: in is block `me` of out
      staged.out = host_alloc({out.numel()}, out.dtype());
      staged.in = call.in_place ? staged.out.view(me * in.numel(), {in.numel()}) : host_alloc({in.numel()}, in.dtype());
      dev.download(in, staged.in.raw());
      result = staged.out;
      break;
    case CommOp::Broadcast:  // one tensor: the root's values reach the others
      staged.in = staged.out = me == call.peer ? download(in) : host_alloc({in.numel()}, in.dtype());
      if (me != call.peer) result = staged.out;
      break;
    case CommOp::Send:
      staged.in = staged.out = download(in);
      break;
    case CommOp::Recv:
      staged.in = staged.out = host_alloc({out.numel()}, out.dtype());
      result = staged.out;
      break;
    case CommOp::Barrier: break;
  }
  std::function<void()> finish;
  if (result.defined()) finish = [&dev, result, out] { dev.upload(result.raw(), out); };
  std::unique_ptr<CommRequest> request = reissue(h, staged, blocking);
  if (!blocking) return std::make_unique<StagedRequest>(std::move(request), std::move(finish));
  if (finish) finish();
  return request;
}

std::unique_ptr<Communicator> communicator_for(std::unique_ptr<Communicator> host, Backend& backend) {
  if (backend.device() == Device::Host) return host;
  return std::make_unique<StagedCommunicator>(std::move(host), backend);
}

}  // namespace tripod
