// Which algorithms Open MPI uses for Tripod's non-blocking collectives.
//
// All-reduce: Open MPI 4.1 (coll/libnbc) runs a non-blocking all-reduce with fewer than 4 ranks, or
// in place (every gradient bucket's), as a binomial reduce to rank 0 and a broadcast back: rank 0
// adds every contribution while the others wait, and the whole message crosses twice. Its ring
// gives each rank 1/p of the additions and sends 2(p-1)/p of the message: `tripod bench overlap`, 2
// ranks, 26 MiB in place, 11-12 ms in communication calls against 29-32 ms (README: Benchmarks).
//
// Reduce: a non-blocking reduce of up to 4 ranks over 64 KiB runs libnbc's chain, in segments,
// which took 2-9x as long as its binomial tree here (`tripod bench comm reduce --async` and
// `reduce_scatter --async`, 2 and 4 ranks, 256 KiB - 16 MiB; README). Tripod's
// two-rank reduce_scatter is two such reduces (comm/mpi_ops.cpp), so every gradient bucket of a
// two-rank ZeRO group goes through it.
//
// So MpiRuntime asks for the ring all-reduce and the binomial reduce before MPI_Init, which reads
// the choice from the environment; a value the user gave (environment or `mpirun -x`) is kept.
// The order of the additions changes only from 3 ranks on (a + b is b + a), and stays fixed by the
// group size and message length alone: never by timing.
#pragma once
#include <string>

namespace tripod {

constexpr const char* kIallreduceAlgorithmVariable = "OMPI_MCA_coll_libnbc_iallreduce_algorithm";
constexpr const char* kIreduceAlgorithmVariable = "OMPI_MCA_coll_libnbc_ireduce_algorithm";

// Before MPI_Init: sets the variables above to the ring all-reduce (1) and the binomial reduce (2)
// unless they are already set.
void prefer_nonblocking_algorithms();

// After MPI_Init: the iallreduce algorithm Open MPI reports through the MPI tool interface
// (0 its own choice, 1 ring, 2 binomial, 3 Rabenseifner, 4 recursive doubling), or -1 where the
// library has no such variable (another MPI).
int iallreduce_algorithm();
std::string iallreduce_algorithm_name(int algorithm);  // "ring", ..., "library default", "unknown"
// The same for the reduce (0 its own choice, 1 chain, 2 binomial, 3 Rabenseifner; -1 none).
int ireduce_algorithm();
std::string ireduce_algorithm_name(int algorithm);  // "chain", "binomial", ..., "library default", "unknown"

}  // namespace tripod
