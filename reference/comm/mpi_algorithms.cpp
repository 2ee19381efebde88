#include "comm/mpi_algorithms.h"

#include <cstdlib>
#include <mpi.h>

namespace tripod {

void prefer_ring_allreduce() { ::setenv(kIallreduceAlgorithmVariable, "1", /*overwrite=*/0); }

int iallreduce_algorithm() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
  int value = -1, index = 0;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS) {
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

}  // namespace tripod
