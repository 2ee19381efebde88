#include "backend/cuda/host/architecture_fit.h"

#include <cctype>
#include <cstddef>

namespace tripod::cuda {
namespace {

// One entry, e.g. "90a-real": capability 90, suffix 'a', real; "90": real and virtual.
struct Architecture {
  int capability = 0;  // major * 10 + minor
  char suffix = 0;     // 'a' (arch-specific), 'f' (family), or 0
  bool real = true, virtual_ = true;
  bool known = false;
};

Architecture parse(const std::string& entry) {
  Architecture a;
  std::size_t i = 0;
  while (i < entry.size() && std::isdigit(static_cast<unsigned char>(entry[i])))
    a.capability = a.capability * 10 + (entry[i++] - '0');
  if (i == 0) return a;  // "all", "native", ...
  if (i < entry.size() && (entry[i] == 'a' || entry[i] == 'f')) a.suffix = entry[i++];
  const std::string kind = entry.substr(i);
  if (kind == "-real") a.virtual_ = false;
  else if (kind == "-virtual") a.real = false;
  else if (!kind.empty()) return a;
  a.known = true;
  return a;
}

// Machine code: arch-specific ("90a") on exactly its capability; otherwise on the same major
// version at the same or a later minor one (sm_80 code runs on 8.6 and 8.9).
bool machine_code_fits(const Architecture& a, int major, int device) {
  if (a.suffix == 'a') return device == a.capability;
  return major == a.capability / 10 && device >= a.capability;
}

bool runs(const Architecture& a, int major, int minor) {
  const int device = major * 10 + minor;
  if (a.real && machine_code_fits(a, major, device)) return true;
  // PTX: plain PTX on any later capability (the driver compiles it); arch- and family-specific
  // PTX only where their machine code would run
  if (a.virtual_) return a.suffix == 0 ? device >= a.capability : machine_code_fits(a, major, device);
  return false;
}

template <class F>
void for_each_entry(const std::string& architectures, F&& f) {
  std::size_t start = 0;
  while (start <= architectures.size()) {
    std::size_t end = architectures.find_first_of(",;", start);
    if (end == std::string::npos) end = architectures.size();
    if (end > start) f(architectures.substr(start, end - start));
    start = end + 1;
  }
}

}  // namespace

bool build_runs_on(const std::string& architectures, int major, int minor) {
  bool fits = false;
  for_each_entry(architectures, [&](const std::string& entry) {
    const Architecture a = parse(entry);
    fits = fits || !a.known || runs(a, major, minor);
  });
  return fits;
}

std::string architecture_mismatch(const std::string& architectures, const std::string& device_name, int major,
                                  int minor) {
  if (build_runs_on(architectures, major, minor)) return "";
  const std::string capability = std::to_string(major * 10 + minor);
  std::string listed = architectures;
  for (char& c : listed)
    if (c == ',') c = ';';
  return device_name + " (sm_" + capability + ") cannot run this build's CUDA code, built for " + listed +
         ": rebuild with -DTRIPOD_CUDA_ARCHITECTURES=\"" + listed + ";" + capability +
         "-real\" (cmake --preset release with it, then the build)";
}

}  // namespace tripod::cuda
