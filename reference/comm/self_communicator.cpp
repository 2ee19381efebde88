#include "comm/self_communicator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

namespace tripod {

namespace detail {

// A recv posted before its send: filled when the send arrives.
struct PendingRecv {
  Tensor dst;
  int tag = 0;
  bool done = false;
  std::string error;  // set when the matching send had another length; thrown by wait()
};

struct Message {
  int tag = 0;
  int64_t numel = 0;
  std::vector<char> bytes;  // host copy, so the sender may reuse its tensor at once
};

struct SelfMailbox {
  std::deque<Message> sent;                           // sends no recv has taken yet
  std::deque<std::shared_ptr<PendingRecv>> waiting;   // recvs no send has filled yet
};
}  // namespace detail

namespace {

using detail::PendingRecv;

class SelfRecvRequest final : public CommRequest {
 public:
  SelfRecvRequest(std::string what, std::shared_ptr<PendingRecv> pending, std::weak_ptr<detail::SelfMailbox> box)
      : what_(std::move(what)), pending_(std::move(pending)), box_(std::move(box)) {}
  // An abandoned recv leaves the mailbox, so no later send writes into its tensor.
  ~SelfRecvRequest() override {
    if (auto box = box_.lock()) std::erase(box->waiting, pending_);
  }

  bool test() override {
    TRIPOD_CHECK(pending_->error.empty(), what_, ": ", pending_->error);
    return pending_->done;
  }
  void wait() override {
    TRIPOD_CHECK(test(), what_, ": no send with tag ", pending_->tag,
                 " has been posted, and a group of one process would wait for it forever");
  }

 private:
  std::string what_;
  std::shared_ptr<PendingRecv> pending_;
  std::weak_ptr<detail::SelfMailbox> box_;
};

}  // namespace

SelfCommunicator::SelfCommunicator(std::string name, Backend* device_backend)
    : name_(std::move(name)), backend_(device_backend), mailbox_(std::make_shared<detail::SelfMailbox>()) {}

SelfCommunicator::~SelfCommunicator() = default;

bool SelfCommunicator::accepts(Device device) const {
  return device == Device::Host || (backend_ != nullptr && backend_->device() == device);
}

// A reduction over one member is a copy, so any dtype will do.
bool SelfCommunicator::can_reduce(DType) const { return true; }

void SelfCommunicator::copy(const Tensor& src, const Tensor& dst) const {
  if (src.bytes() == 0 || src.address() == dst.address()) return;
  if (src.device() == Device::Host) {
    std::memmove(dst.raw(), src.raw(), src.bytes());
  } else {
    backend_->copy(src, dst);
  }
}

std::unique_ptr<Communicator> SelfCommunicator::do_split(int color, int, const std::string& name) const {
  if (color < 0) return nullptr;
  return std::make_unique<SelfCommunicator>(name, backend_);
}

std::unique_ptr<CommRequest> SelfCommunicator::start(const CommCall& call, bool) {
  const std::string at = where(call.op);
  switch (call.op) {
    case CommOp::AllReduce:
    case CommOp::ReduceScatter:
    case CommOp::AllGather:
    case CommOp::Reduce:
    case CommOp::AllToAll:
      if (!call.in_place) copy(call.in, call.out);
      break;
    case CommOp::Broadcast:
    case CommOp::Barrier:
      break;
    case CommOp::Send: {
      detail::Message message{call.tag, call.in.numel(), std::vector<char>(call.in.bytes())};
      if (call.in.device() == Device::Host) {
        if (call.in.bytes()) std::memcpy(message.bytes.data(), call.in.raw(), call.in.bytes());
      } else {
        backend_->download(call.in, message.bytes.data());
      }
      auto& waiting = mailbox_->waiting;
      auto match = std::find_if(waiting.begin(), waiting.end(), [&](const auto& r) { return r->tag == call.tag; });
      if (match == waiting.end()) {
        mailbox_->sent.push_back(std::move(message));
        break;
      }
      std::shared_ptr<PendingRecv> recv = *match;
      waiting.erase(match);
      if (recv->dst.numel() != message.numel) {
        recv->error = str_cat("the matching send has ", message.numel, " elements, not ", recv->dst.numel());
      } else if (recv->dst.device() == Device::Host) {
        if (!message.bytes.empty()) std::memcpy(recv->dst.raw(), message.bytes.data(), message.bytes.size());
      } else {
        backend_->upload(message.bytes.data(), recv->dst);
      }
      recv->done = true;
      break;
    }
    case CommOp::Recv: {
      auto pending = std::make_shared<PendingRecv>();
      pending->dst = call.out;
      pending->tag = call.tag;
      auto& sent = mailbox_->sent;
      auto match = std::find_if(sent.begin(), sent.end(), [&](const detail::Message& m) { return m.tag == call.tag; });
      if (match == sent.end()) {
        mailbox_->waiting.push_back(pending);
      } else {
        TRIPOD_CHECK(match->numel == call.out.numel(), at, ": the matching send has ", match->numel, " elements, not ",
                     call.out.numel());
        if (call.out.device() == Device::Host) {
          if (!match->bytes.empty()) std::memcpy(call.out.raw(), match->bytes.data(), match->bytes.size());
        } else {
          backend_->upload(match->bytes.data(), call.out);
        }
        sent.erase(match);
        pending->done = true;
      }
      return std::make_unique<SelfRecvRequest>(at, pending, mailbox_);
    }
  }
  return std::make_unique<CompletedRequest>();
}

}  // namespace tripod
