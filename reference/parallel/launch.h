// Launch detection: which rank this process is, and how many share its node, from the
// environment the launcher set, before (or without) asking MPI. The local rank picks the GPU and
// the per-rank thread count; the global rank and size must agree with the MPI world, which
// check_launch_matches verifies (a mismatch means the program was started by one launcher but
// linked against another MPI, or started once per node by hand).
//
// Recognised, first match wins (mpirun inside a Slurm job sets both, and Open MPI's variables
// describe the processes that actually run):
//   openmpi   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (srun); without the
//             last, the leading count of SLURM_TASKS_PER_NODE ("4(x2)" -> 4; exact for the uniform
//             layouts Tripod uses)
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   single    none of the above: rank 0 of 1
// A launcher counts as present when its rank and size variables are both set. Missing local
// variables mean one node: local rank = rank, local size = world size.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "comm/communicator.h"

namespace tripod {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string launcher = "single";  // "openmpi", "slurm", "torchrun" or "single"
};

// Looks up an environment variable; tests pass a map instead of the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<std::string> process_env(const std::string& name);

// Throws tripod::Error naming the variable when a value is not an integer or out of range.
LaunchInfo detect_launch(const EnvLookup& env = process_env);

// "openmpi: rank 3 of 8, local 1 of 2"
std::string describe(const LaunchInfo& launch);

// Throws unless the world communicator has the launcher's rank and size. Local, no communication.
void check_launch_matches(const LaunchInfo& launch, const Communicator& world);

}  // namespace tripod
