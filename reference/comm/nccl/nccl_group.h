// One NCCL communicator with its stream and its way of failing: every NCCL result is checked, and a
// failure, an asynchronous error or a timeout aborts the communicator and throws tripod::Error
// naming the operation, the group and the rank (comm/nccl/nccl_communicator.h).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/dtype.h"

namespace tripod::nccl {

ncclDataType_t nccl_dtype(DType dtype);
const char* nccl_result_text(ncclResult_t result);

class NcclGroup {
 public:
  // Takes ownership of `comm` and makes its stream on the current device.
  NcclGroup(ncclComm_t comm, std::string label);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  // The communicator for a new operation; throws once it has been aborted (its handle is freed).
  ncclComm_t comm() const;
  cudaStream_t stream() const { return stream_; }

  // A failed NCCL call: aborts the communicator and throws "`what`: NCCL ...".
  void check(ncclResult_t result, const std::string& what);
  // A failed CUDA call (no abort: NCCL is not at fault).
  static void check_cuda(cudaError_t status, const std::string& what);
  // Polls `done` until it has completed, checking ncclCommGetAsyncError and the communication
  // timeout; on either, aborts and throws naming `what`.
  void await(cudaEvent_t done, const std::string& what);
  // Non-blocking: has `done` completed? (asynchronous errors are raised as in await)
  bool poll(cudaEvent_t done, const std::string& what);
  // Aborts without throwing: an operation abandoned in flight (its request destroyed while the
  // stack unwinds) must stop before the memory it writes is given back.
  void abort_quietly();
  // Any NCCL failure in this process, or a CUDA failure around NCCL work: from then on every
  // communicator is aborted, not destroyed, when it goes (ncclCommDestroy waits for outstanding
  // operations, which after a failure may wait for peers that will never come).
  static void note_failure();

 private:
  [[noreturn]] void abort_and_fail(const std::string& what, const std::string& why);
  ncclComm_t comm_ = nullptr;  // null once aborted (ncclCommAbort frees it)
  cudaStream_t stream_ = nullptr;
  std::string label_;
};

}  // namespace tripod::nccl
