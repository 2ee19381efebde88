// Which algorithms Open MPI uses for Tripod's non-blocking collectives.
//
// Open MPI 4.1 (coll/libnbc) runs a non-blocking all-reduce with fewer than 4 ranks, or in place
// (every gradient bucket's), as a binomial reduce to rank 0 and a broadcast back: rank 0 adds every
// contribution while the others wait, and the whole message crosses twice. Its ring gives each rank
// 1/p of the additions and sends 2(p-1)/p of the message: `tripod bench overlap`, 2 ranks, 26 MiB in
// place, 11-12 ms in communication calls against 29-32 ms (README: Benchmarks). So MpiRuntime asks for
// the ring before MPI_Init, which reads the choice from the environment; a value the user gave
// (environment or `mpirun -x`) is kept. The order of the additions changes only from 3 ranks on
// (a + b is b + a), and stays fixed by the group size and message length alone: never by timing.
#pragma once
#include <string>

namespace tripod {

constexpr const char* kIallreduceAlgorithmVariable = "OMPI_MCA_coll_libnbc_iallreduce_algorithm";

// Before MPI_Init: sets the variable above to the ring unless it is already set.
void prefer_ring_allreduce();

// After MPI_Init: the iallreduce algorithm Open MPI reports through the MPI tool interface
// (0 its own choice, 1 ring, 2 binomial, 3 Rabenseifner, 4 recursive doubling), or -1 where the
// library has no such variable (another MPI).
int iallreduce_algorithm();
std::string iallreduce_algorithm_name(int algorithm);  // "ring", ..., "library default", "unknown"

}  // namespace tripod
