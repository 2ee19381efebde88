// tripod --version: the build (commit, build type, compiler, -march) and the libraries under each
// backend and communicator, as nccl-tests prints NCCL's. Nothing here touches a device or starts
// MPI, so it answers on a login node too.
#include <omp.h>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "comm/world.h"
#include "core/build_info.h"
#include "process/openmp_wait_policy.h"

namespace tripod::cli {
namespace {

std::string version_text() {
  std::string text = "tripod " + build_info_text() + "\n";
  text += "backends: " + backend_names_text() + "\n";
  for (const std::string& line : backend_library_versions()) text += "  " + line + "\n";
  text += "communicators: " + comm_kind_names_text() + "\n";
  for (const std::string& line : comm_library_versions()) text += "  " + line + "\n";
  text += "OpenMP: " + std::to_string(omp_get_max_threads()) + " threads, idle threads: " + openmp_wait_text() +
          "\n";
  text.pop_back();  // CLI11 adds the last newline
  return text;
}

}  // namespace

void add_version_flag(CLI::App& app) {
  app.set_version_flag("--version", version_text,
                       "print this build's version, commit and libraries (BLAS, MPI, CUDA, NCCL) and exit");
}

}  // namespace tripod::cli
