// StagedCommunicator: collectives on a device's tensors through a communicator that moves only
// host memory. Debian's Open MPI is not CUDA-aware, so this is the path a GPU's tensors take to
// MPI: each call downloads its input into host buffers, runs the host communicator's operation on
// them (asynchronously, if asked), and uploads the result when it completes. The emulated-device
// backend takes exactly this path on a CPU, so it is tested wherever the suites run.
//
// Host tensors (reports, timings, flags) pass straight through; tensors of any other device are
// refused. In-place calls stay in place in the staging buffers, so the host communicator sees the
// call the caller made. Splits are staged the same way.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace tripod {

class StagedCommunicator final : public Communicator {
 public:
  // `device` (not owned) must outlive this communicator and every request it starts.
  StagedCommunicator(std::unique_ptr<Communicator> host, Backend& device);
  ~StagedCommunicator() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string name() const override { return host_->name(); }

 protected:
  bool accepts(Device device) const override;
  bool can_reduce(DType) const override { return true; }  // the host communicator checks its own rules
  std::unique_ptr<CommRequest> start(const CommCall& call, bool blocking) override;
  std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name) const override;

 private:
  std::unique_ptr<Communicator> host_;
  Backend& device_;
};

// The communicator a backend's tensors can use: `host` itself when the backend computes in host
// memory, else `host` wrapped in a StagedCommunicator for it.
std::unique_ptr<Communicator> communicator_for(std::unique_ptr<Communicator> host, Backend& backend);

}  // namespace tripod
