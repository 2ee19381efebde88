// Which CUDA device a process uses: TRIPOD_CUDA_DEVICE when set, else the launcher's local rank
// (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, Slurm's SLURM_LOCALID, torchrun's LOCAL_RANK: the first
// set, in the order parallel/launch.h detects the rank, so that the GPU and the rank come from
// the same launcher) modulo the devices present, else 0. Pure host code, so the rule is
// unit-tested without a GPU.
#pragma once
#include <functional>
#include <string>

namespace tripod::cuda {

// `env` returns a variable's value, or "" when it is not set. Throws when TRIPOD_CUDA_DEVICE is
// not a device index below `device_count`, or when there are no devices.
int choose_device(int device_count, const std::function<std::string(const char*)>& env);
// The same with the process's environment.
int choose_device(int device_count);

}  // namespace tripod::cuda
