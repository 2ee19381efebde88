// Ranks that share a machine share its cores. Unless OMP_NUM_THREADS says otherwise, each rank
// runs
//     threads = max(1, min(its own CPUs, the CPUs its machine's ranks may use together / their number))
// OpenMP threads (OpenBLAS's OpenMP build follows them): ranks bound to their own cores use those;
// unbound ranks split the machine; ranks that outnumber the cores run one thread each. The last
// case matters most: 8 ranks of 2 threads each on 2 cores spend their time in OpenMP's spinning
// barriers (a conform of two layouts took 71.5 s instead of 0.65 s), while a one-thread team
// never waits for another thread. "CPUs" are those the process may run on (its affinity mask, as
// mpirun's binding, Slurm's cgroup or a container's cpuset leave it), not the machine's count.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tripod {

struct CoreShare {
  int local_ranks = 1;   // ranks on this machine (this one included)
  int own_cpus = 1;      // CPUs this rank may run on
  int machine_cpus = 1;  // CPUs this machine's ranks may run on together
  int threads = 1;       // OpenMP threads per rank
  bool from_env = false; // OMP_NUM_THREADS was set: threads is its value, nothing was changed
};

// The formula above (pure).
int threads_per_rank(int own_cpus, int machine_cpus, int local_ranks);

// This rank's view: `others` holds every rank's "host|cpu list" (this one's included), `mine` this
// rank's. Pure, for the tests; share_cores gathers the texts.
CoreShare core_share_of(const std::string& mine, const std::vector<std::string>& all);
std::string core_share_text();  // "host|0,1,2,3": this process's host name and CPUs

// Collective over `world`: applies the thread count (omp_set_num_threads) unless OMP_NUM_THREADS
// is set, and returns what it found.
CoreShare share_cores(Communicator& world);

// What the last share_cores of this process found (nothing before one ran), for start-up reports.
std::optional<CoreShare> process_core_share();

// "8 ranks on this machine, 2 CPUs between them, 2 for this rank: 1 thread per rank"
std::string describe(const CoreShare& share);

}  // namespace tripod
