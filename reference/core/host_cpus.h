// How many CPUs this process may run on: its affinity mask (what taskset, Slurm's cgroups or
// mpirun's binding left it), else the online CPUs. Read by the sweeps and the bench suite to size
// their jobs, by the nominal CPU peak (threads beyond it add no FLOPs) and by the OMP_NUM_THREADS
// check.
#pragma once

namespace tripod {

int available_cores();

}  // namespace tripod
