// How many CPUs this process may run on: its affinity mask (what taskset, Slurm's cgroups or
// mpirun's binding left it), else the online CPUs. Read by the sweeps and the bench suite to size
// their jobs, by the nominal CPU peak (threads beyond it add no FLOPs) and by the OMP_NUM_THREADS
// check. And the CPU time this process has had, to tell a benchmark slowed by other processes on
// its cores from a slow transport.
#pragma once

namespace tripod {

int available_cores();

// CPU seconds the calling thread has run so far (CLOCK_THREAD_CPUTIME_ID). Over a timed region,
// CPU time / wall time is the share of it the thread was on a CPU: about 1 for a thread that
// busy-waits (an MPI rank in a collective), less where the scheduler gave its core to another
// process. The process's time counted its other threads too (OpenMP's, MPI's) and read above 1.
double thread_cpu_seconds();
// Below this share of a CPU over a timed region, a busy-waiting process was held off its core by
// other processes: `bench comm` warns, and the bench summaries say "cores shared" (reports/
// main_summary.py states the same number).
inline constexpr double kSharedCpuShare = 0.9;

}  // namespace tripod
