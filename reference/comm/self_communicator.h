// SelfCommunicator: the group of one process, without MPI, so single-process runs and tests use
// the same code path as parallel ones. Every collective of a group of one is a copy (or nothing,
// in place); Avg of one value is the value. send/recv to oneself go through a mailbox: a send is
// buffered until a recv with the same tag takes it (either may come first, as with MPI), and
// waiting on a recv that no send can match throws instead of hanging.
//
// Host tensors are copied with memmove. Given a Backend, tensors on that backend's device are
// copied with it (so a single-GPU run needs no NCCL either).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace tripod {

namespace detail {
struct SelfMailbox;  // defined in self_communicator.cpp
}

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name = "self", Backend* device_backend = nullptr);
  ~SelfCommunicator() override;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }

 protected:
  bool accepts(Device device) const override;
  bool can_reduce(DType dtype) const override;
  std::unique_ptr<CommRequest> start(const CommCall& call, bool blocking) override;
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) const override;

 private:
  void copy(const Tensor& src, const Tensor& dst) const;

  std::string name_;
  Backend* backend_;  // not owned; may be null (host tensors only)
  std::shared_ptr<detail::SelfMailbox> mailbox_;
};

}  // namespace tripod
