#include "comm/mpi_algorithms.h"

#include <cstdlib>
#include <mpi.h>

namespace tripod {

void prefer_nonblocking_algorithms() {
  ::setenv(kIallreduceAlgorithmVariable, "1", /*overwrite=*/0);
  ::setenv(kIreduceAlgorithmVariable, "2", /*overwrite=*/0);
}

namespace {
// A libnbc control variable's value through the MPI tool interface, -1 where there is none.
int libnbc_algorithm(const char* variable) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
  int value = -1, index = 0;
  if (MPI_T_cvar_get_index(variable, &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count != 1 || MPI_T_cvar_read(handle, &value) != MPI_SUCCESS) value = -1;
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return value;
}
}  // namespace

int iallreduce_algorithm() { return libnbc_algorithm("coll_libnbc_iallreduce_algorithm"); }
int ireduce_algorithm() { return libnbc_algorithm("coll_libnbc_ireduce_algorithm"); }

std::string iallreduce_algorithm_name(int algorithm) {
  switch (algorithm) {
    case 0: return "library default";
    case 1: return "ring";
    case 2: return "binomial";
    case 3: return "rabenseifner";
    case 4: return "recursive doubling";
    default: return "unknown";
  }
}

std::string ireduce_algorithm_name(int algorithm) {
  switch (algorithm) {
    case 0: return "library default";
    case 1: return "chain";
    case 2: return "binomial";
    case 3: return "rabenseifner";
    default: return "unknown";
  }
}

}  // namespace tripod
