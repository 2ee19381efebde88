#include "comm/mpi_algorithms.h"

#include <cstddef>
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

namespace {
// Index = Open MPI's number for the algorithm.
template <std::size_t N>
std::string algorithm_name(const char* const (&names)[N], int algorithm) {
  return algorithm >= 0 && static_cast<std::size_t>(algorithm) < N ? names[algorithm] : "unknown";
}
constexpr const char* kIallreduceNames[] = {"library default", "ring", "binomial", "rabenseifner",
                                            "recursive doubling"};
constexpr const char* kIreduceNames[] = {"library default", "chain", "binomial", "rabenseifner"};
}  // namespace

std::string iallreduce_algorithm_name(int algorithm) { return algorithm_name(kIallreduceNames, algorithm); }
std::string ireduce_algorithm_name(int algorithm) { return algorithm_name(kIreduceNames, algorithm); }

}  // namespace tripod
