// The processes below one process, read from /proc: `tripod launch` stops a job's processes that
// left its process group (Open MPI 4's mpirun starts each local rank in a group of its own, so a
// signal to mpirun's group never reached them, and a killed mpirun left them training).
#pragma once
#include <sys/types.h>

#include <vector>

namespace tripod::process {

// The live (not zombie) descendants of `root`, by their parent links at the time of reading; a
// process that starts or ends meanwhile may be missed or listed, which the callers allow for.
std::vector<pid_t> live_descendants(pid_t root);

// The process group of `pid`, or -1 when it has gone.
pid_t process_group(pid_t pid);

}  // namespace tripod::process
