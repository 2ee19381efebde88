#include "process/openmp_wait_policy.h"

#include <climits>
#include <cstdlib>
#include <string_view>
#include <unistd.h>

namespace tripod {
namespace {
constexpr const char* kSpinCount = "10000";
// Marks a setting that tripod made (inherited by its children), for openmp_wait_text.
constexpr const char* kSetByTripod = "TRIPOD_SET_GOMP_SPINCOUNT";
}  // namespace

void bound_openmp_spinning(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  char exe[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length <= 0) return;
  exe[length] = '\0';
  const std::string_view path(exe, static_cast<std::size_t>(length));
  const std::string_view name = path.substr(path.rfind('/') + 1);
  if (name.starts_with("ld-") || name.starts_with("ld.so")) return;  // a loader: its arguments are gone
  if (setenv("GOMP_SPINCOUNT", kSpinCount, 1) != 0 || setenv(kSetByTripod, "1", 1) != 0) return;
  execv(exe, argv);
  unsetenv("GOMP_SPINCOUNT");  // exec failed: this process keeps the default, as its children will
  unsetenv(kSetByTripod);
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
