#include "comm/world.h"

#include <cmath>

#include "comm/mpi_progress.h"

#include "comm/core_sharing.h"
#include "comm/mpi_communicator.h"
#include "comm/staged_communicator.h"
#include "core/error.h"
#ifdef TRIPOD_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace tripod {

std::vector<std::string> comm_kind_names() { return {"auto", "mpi", "staged", "nccl"}; }

std::string comm_kind_names_text() {
  std::string text;
  for (const std::string& name : comm_kind_names()) text += (text.empty() ? "" : ", ") + name;
  return text;
}

bool nccl_built() {
#ifdef TRIPOD_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string resolve_comm_kind(const std::string& kind, const Backend& backend) {
  return resolve_comm_kind(kind, backend.device(), backend.name());
}

std::string resolve_comm_kind(const std::string& kind, Device device, const std::string& backend_name) {
  const bool host = device == Device::Host;
  const bool cuda = device == Device::Cuda;
  if (kind == "auto") return host ? "mpi" : cuda ? "nccl" : "staged";
  if (kind == "mpi") {
    if (!host)
      fail("--comm mpi moves host memory only, and the ", backend_name,
           " backend's tensors live on a device: use --comm staged", cuda ? " or --comm nccl" : "");
    return kind;
  }
  if (kind == "staged") return host ? "mpi" : kind;  // host tensors need no staging
  if (kind == "nccl") {
    if (!cuda) fail("--comm nccl moves CUDA tensors only: use it with --backend cuda (this run's backend is '",
                    backend_name, "')");
    if (!nccl_built()) fail("--comm nccl: this tripod was built without NCCL (no CUDA toolkit found at build time)");
    return kind;
  }
  fail("--comm: unknown communicator '", kind, "' (one of: ", comm_kind_names_text(), ")");
}

std::vector<std::string> comm_library_versions() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  std::string mpi = MPI_Get_library_version(text, &length) == MPI_SUCCESS ? std::string(text, length) : "unknown";
  mpi = mpi.substr(0, mpi.find_first_of("\n,"));  // "Open MPI v4.1.6, package: ..." -> its first part
  std::vector<std::string> lines = {"mpi, staged: " + mpi};
#ifdef TRIPOD_HAVE_NCCL
  lines.push_back("nccl: " + nccl_version_text());
#endif
  return lines;
}

void check_comm_settings(const CommSettings& settings) {
  // NaN compares false with everything, so each range check below also refuses it; the message
  // says which it was. Out-of-range doubles must not reach the integer and duration conversions.
  const auto what = [](double value) { return std::isnan(value) ? "is not a number" : "is out of range"; };
  const double timeout = settings.timeout_seconds, chunk = settings.mpi_chunk_mb;
  check(timeout >= 0 && timeout <= 1e9, "--comm-timeout: ", timeout, " s ", what(timeout),
        " (seconds, 0-1e9; 0 turns the timeout off)");
  check(chunk >= 0 && chunk <= 1048576, "--mpi-chunk-mb: ", chunk, " ", what(chunk),
        " (MiB, 0-1048576; 0: whole messages)");
  // Below a byte it became 0 bytes, which means whole messages: the opposite of what was asked.
  check(chunk == 0 || chunk * 1048576.0 >= 1, "--mpi-chunk-mb: ", chunk, " MiB is less than a byte (0: whole messages)");
  check(settings.progress_us >= 0, "--mpi-progress-us: ", settings.progress_us, " is negative (0: no progress thread)");
}

std::unique_ptr<Communicator> make_world(Backend& backend, const CommSettings& settings) {
  check_comm_settings(settings);
  set_comm_timeout(settings.timeout_seconds);
  const std::string kind = resolve_comm_kind(settings.kind, backend);
  std::unique_ptr<Communicator> host = mpi_world(static_cast<int64_t>(settings.mpi_chunk_mb * 1048576.0));
  share_cores(*host);  // before any OpenMP team of this process computes
  if (settings.progress_us > 0) MpiProgress::start(std::chrono::microseconds(settings.progress_us));
  if (kind == "mpi") return host;
  if (kind == "staged") return std::make_unique<StagedCommunicator>(std::move(host), backend);
#ifdef TRIPOD_HAVE_NCCL
  return nccl_world(std::move(host), backend);
#else
  fail("--comm nccl: this tripod was built without NCCL");
#endif
}

}  // namespace tripod
