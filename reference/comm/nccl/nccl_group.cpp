#include "comm/nccl/nccl_group.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "comm/comm_watchdog.h"
#include "core/error.h"

namespace tripod::nccl {

namespace {
std::atomic<bool> any_failure{false};
}  // namespace

void NcclGroup::note_failure() { any_failure = true; }

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
  }
  fail("NCCL: no NCCL type for dtype ", dtype_name(dtype));
}

const char* nccl_result_text(ncclResult_t result) { return ncclGetErrorString(result); }

NcclGroup::NcclGroup(ncclComm_t comm, std::string label) : comm_(comm), label_(std::move(label)) {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), label_ + ": cudaStreamCreate");
}

NcclGroup::~NcclGroup() {
  // ncclCommDestroy waits for the communicator's outstanding work. After a failure anywhere in the
  // process, or while an error unwinds the stack (a sibling's receive may still wait for a peer
  // that has failed), that wait could be forever: abort instead, so that the error reaches the
  // user and the job ends.
  if (comm_) {
    if (any_failure || std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  if (stream_) cudaStreamDestroy(stream_);
}

ncclComm_t NcclGroup::comm() const {
  if (!comm_) fail(label_, ": the NCCL communicator was aborted after an earlier failure");
  return comm_;
}

void NcclGroup::abort_quietly() {
  any_failure = true;
  if (!comm_) return;
  ncclCommAbort(comm_);
  comm_ = nullptr;  // freed by the abort: never passed to NCCL again
}

void NcclGroup::check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) fail(what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

void NcclGroup::abort_and_fail(const std::string& what, const std::string& why) {
  abort_quietly();  // frees the GPU from kernels that wait for peers that will not come
  fail(what, ": ", why, "; the NCCL communicator was aborted");
}

void NcclGroup::check(ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return;
  const char* detail = comm_ ? ncclGetLastError(comm_) : nullptr;
  abort_and_fail(what, str_cat("NCCL ", nccl_result_text(result),
                               detail && *detail ? std::string(" (") + detail + ")" : std::string()));
}

bool NcclGroup::poll(cudaEvent_t done, const std::string& what) {
  if (!comm_) fail(what, ": the NCCL communicator ", label_, " was aborted after an earlier failure");
  ncclResult_t async = ncclSuccess;
  check(ncclCommGetAsyncError(comm_, &async), what + ": ncclCommGetAsyncError");
  if (async != ncclSuccess && async != ncclInProgress)
    abort_and_fail(what, str_cat("asynchronous NCCL error ", nccl_result_text(async), " (", ncclGetLastError(comm_), ")"));
  const cudaError_t state = cudaEventQuery(done);
  if (state == cudaSuccess) return true;
  // Event queries return the context's sticky error: a compute kernel's fault shows here too.
  if (state != cudaErrorNotReady)
    abort_and_fail(what, str_cat("CUDA error ", cudaGetErrorName(state), " (", cudaGetErrorString(state), ")",
                                 cuda::cuda_error_hint(state)));
  return false;
}

void NcclGroup::await(cudaEvent_t done, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const double timeout = comm_timeout_seconds();
  const Clock::time_point start = Clock::now();
  for (int spins = 0;; ++spins) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (poll(done, what)) {
      add_comm_wait_seconds(waited);
      return;
    }
    if (timeout > 0 && waited >= timeout)
      abort_and_fail(what, str_cat("did not complete within ", timeout, " s (--comm-timeout): a peer rank is stopped,",
                                   " hung, or waiting in a different operation"));
    // Spin first (small collectives finish in microseconds), then stop burning a core.
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace tripod::nccl
