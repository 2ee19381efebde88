// How many ranks the suite's multi-rank steps (collectives, training, pipeline) launch on this
// node, and through which communicator. On the CPU: one rank per core (at least 2). On
// --backend cuda a rank per GPU is the layout a cluster runs, and NCCL refuses two ranks on one
// GPU: so with fewer GPUs than ranks (a one-GPU node) `--comm auto` becomes `staged` (device ->
// host -> MPI), which several ranks can share a GPU through. The GPUs are counted from NVML
// (no CUDA context is made in the suite's own process) and CUDA_VISIBLE_DEVICES. Pure function,
// unit-tested without a GPU.
#pragma once
#include <string>

namespace tripod::bench {

struct SuiteRanks {
  int ranks = 2;
  std::string comm = "auto";  // what the multi-rank steps are given ("auto": no --comm at all)
  std::string why;            // one line for the suite's header when the choice was made for the user
};

// `requested_ranks` 0 and `requested_comm` "auto" leave the choice to this function; anything
// else the user typed is kept. `visible_gpus` < 0: unknown (no NVML); 0 is the caller's error to
// report (the CUDA steps cannot run).
SuiteRanks plan_suite_ranks(int requested_ranks, const std::string& requested_comm, bool cuda, int cores,
                            int visible_gpus);

// The GPUs this process's children will see: NVML's count, cut to the entries of
// CUDA_VISIBLE_DEVICES when it is set ("" hides every GPU). -1 when NVML gave no count.
int visible_gpu_count(int nvml_count, bool nvml_available, const char* cuda_visible_devices);

}  // namespace tripod::bench
