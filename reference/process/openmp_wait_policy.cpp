#include "process/openmp_wait_policy.h"

#include <cstdlib>

namespace tripod {
namespace {
constexpr const char* kSpinCount = "10000";
// Marks a setting that tripod made (inherited by its children), for openmp_wait_text.
constexpr const char* kSetByTripod = "TRIPOD_SET_GOMP_SPINCOUNT";
}  // namespace

EnvironmentSettings openmp_spinning_settings() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return {};
  return {{"GOMP_SPINCOUNT", kSpinCount}, {kSetByTripod, "1"}};
}

std::string openmp_wait_text() {
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) return std::string(policy) + " (OMP_WAIT_POLICY)";
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (spin == nullptr) return "the runtime's default (300,000 polls, then sleeps): started through a loader";
  const std::string text = std::string("spins ") + spin + " polls, then sleeps (GOMP_SPINCOUNT";
  if (std::getenv(kSetByTripod) != nullptr) return text + ", set by tripod; OMP_WAIT_POLICY or GOMP_SPINCOUNT choose)";
  return text + ")";
}

}  // namespace tripod
