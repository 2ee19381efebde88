#include "bench/suite_ranks.h"

#include <algorithm>

namespace tripod::bench {

SuiteRanks plan_suite_ranks(int requested_ranks, const std::string& requested_comm, bool cuda, int cores,
                            int visible_gpus) {
  SuiteRanks plan;
  plan.comm = requested_comm;
  if (!cuda) {
    plan.ranks = requested_ranks > 0 ? requested_ranks : std::max(2, cores);
    return plan;
  }
  const bool known = visible_gpus >= 0;
  // A rank per GPU; 2 at least, so that the collectives have a peer (on one GPU: staged).
  plan.ranks = requested_ranks > 0 ? requested_ranks : std::max(2, visible_gpus);
  if (requested_comm != "auto") return plan;
  if (!known) {
    plan.why = "the GPU count is unknown (no NVML): the multi-rank steps use NCCL, which needs a GPU per rank "
               "(--comm staged shares one)";
    return plan;
  }
  if (plan.ranks > visible_gpus) {
    plan.comm = "staged";
    plan.why = std::to_string(plan.ranks) + " ranks on " + std::to_string(visible_gpus) +
               " GPU(s): NCCL refuses two ranks on one GPU, so the multi-rank steps use --comm staged";
  } else {
    plan.comm = "nccl";
    plan.why = std::to_string(plan.ranks) + " ranks on " + std::to_string(visible_gpus) +
               " GPU(s): the multi-rank steps use --comm nccl, one GPU per rank";
  }
  return plan;
}

int visible_gpu_count(int nvml_count, bool nvml_available, const char* cuda_visible_devices) {
  if (!nvml_available) return -1;
  if (cuda_visible_devices == nullptr) return nvml_count;
  // Entries separated by commas (indices, or UUIDs "GPU-…"); CUDA stops at the first invalid
  // one, so this is an upper bound, which is all the choice above needs.
  const std::string list = cuda_visible_devices;
  int entries = 0;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    if (end > start) ++entries;
    start = end + 1;
  }
  return std::min(nvml_count, entries);
}

}  // namespace tripod::bench
