// Settings that a library reads once, when it is loaded, before main: libgomp's GOMP_SPINCOUNT
// (process/openmp_wait_policy.h), OpenBLAS's OPENBLAS_CORETYPE (backend/cpu/blas_kernels.h). A
// program can change them only by executing itself again with them in its environment, which
// tripod does at once at start-up. The same process (pid) goes on, so launchers (mpirun, Slurm,
// tripod launch) see nothing; its children inherit the settings and do not execute again.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tripod {

using EnvironmentSettings = std::vector<std::pair<std::string, std::string>>;  // name, value

// Sets `settings` and executes this program again with `argv`. Returns only when there is nothing
// to set, or it cannot: started through a dynamic loader (the GPU bundle's `ld-linux-x86-64.so.2
// --library-path DIR tripod ...`, which running /proc/self/exe again would restart without its
// arguments), or the execution failed; then the settings are unset again and the libraries' own
// choices stay.
void execute_again_with(const EnvironmentSettings& settings, char** argv);

}  // namespace tripod
