#include "backend/unwritten_poison.h"

#include "backend/cuda/host/process_env.h"
#include "core/error.h"

namespace tripod {

bool choose_unwritten_poison(const std::function<std::string(const char*)>& env) {
  const std::string value = env("TRIPOD_POISON_UNWRITTEN");
  if (value.empty() || value == "0") return false;
  if (value == "1") return true;
  fail("TRIPOD_POISON_UNWRITTEN is 1 (fill memory allocated for overwrite with NaN bytes) or 0, not '", value, "'");
}

bool choose_unwritten_poison() { return choose_unwritten_poison(cuda::process_env); }

}  // namespace tripod
