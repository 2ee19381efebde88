// The communicator all of a command's ranks share, chosen by `--comm` for the backend:
//   mpi     host memory through Open MPI (the CPU backend's);
//   staged  a device's tensors copied to host buffers and moved by Open MPI (any number of ranks
//           per GPU: how a single GPU runs multi-rank layouts; the emulated backend's);
//   nccl    the CUDA backend's tensors moved by NCCL on the GPU (one rank per GPU);
//   auto    (default) nccl for the CUDA backend, staged for other devices, mpi for host memory.
// It also sets the communication timeout (comm/comm_watchdog.h) for the process.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/comm_watchdog.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"

namespace tripod {

struct CommSettings {
  std::string kind = "auto";  // auto, mpi, staged, nccl
  double timeout_seconds = kDefaultCommTimeoutSeconds;
  int progress_us = 0;  // > 0: an MPI progress thread polling every N microseconds (comm/mpi_progress.h)
  double mpi_chunk_mb = kDefaultMpiChunkBytes / 1048576.0;  // larger MPI reductions go in pieces (0: never)
};

std::vector<std::string> comm_kind_names();  // auto, mpi, staged, nccl
std::string comm_kind_names_text();          // "auto, mpi, staged, nccl"
// The numbers in `settings` (--comm-timeout, --mpi-progress-us, --mpi-chunk-mb) are in range: an
// Error naming the option otherwise. make_world checks them; so do commands that may make none.
void check_comm_settings(const CommSettings& settings);
bool nccl_built();                   // this program was built with the NCCL communicator
// The communication libraries, one line each, for `tripod --version`: the MPI library's own
// description (callable before MPI_Init) and, where built, NCCL's version.
std::vector<std::string> comm_library_versions();

// The kind `auto` resolves to for `backend` (or the kind asked for); an unknown kind, or one that
// cannot move the backend's tensors, is an Error saying which kinds can.
std::string resolve_comm_kind(const std::string& kind, const Backend& backend);
// The same for tensors on `device`, of the backend described by `backend_name`.
std::string resolve_comm_kind(const std::string& kind, Device device, const std::string& backend_name);

// Needs an MpiRuntime. Collective over all processes of the launch.
std::unique_ptr<Communicator> make_world(Backend& backend, const CommSettings& settings);

}  // namespace tripod
