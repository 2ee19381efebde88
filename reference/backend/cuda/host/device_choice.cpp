#include "backend/cuda/host/device_choice.h"

#include "backend/cuda/host/process_env.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

bool parse_index(const std::string& text, int& value) {
  if (text.empty() || text.size() > 6) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  value = std::stoi(text);
  return true;
}

}  // namespace

int choose_device(int device_count, const std::function<std::string(const char*)>& env) {
  check(device_count > 0, "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES='",
        env("CUDA_VISIBLE_DEVICES"), "')");
  const std::string forced = env("TRIPOD_CUDA_DEVICE");
  if (!forced.empty()) {
    int device = -1;
    check(parse_index(forced, device) && device < device_count, "TRIPOD_CUDA_DEVICE='", forced,
          "' is not a device index below the ", device_count, " visible device(s)");
    return device;
  }
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    int local_rank = -1;
    const std::string value = env(name);
    if (value.empty()) continue;
    check(parse_index(value, local_rank), name, "='", value, "' is not a local rank");
    return local_rank % device_count;
  }
  return 0;
}

int choose_device(int device_count) {
  return choose_device(device_count, process_env);
}

}  // namespace tripod::cuda
