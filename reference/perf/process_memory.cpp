#include "perf/process_memory.h"

#include <fstream>
#include <string>

namespace tripod {
namespace {

// A "Name:   1234 kB" line of /proc/self/status, in bytes; 0 where there is none.
std::size_t status_kib(const std::string& name) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.compare(0, name.size() + 1, name + ":") == 0) return std::stoull(line.substr(name.size() + 1)) * 1024;
  return 0;
}

}  // namespace

std::size_t resident_bytes() { return status_kib("VmRSS"); }

std::size_t peak_resident_bytes() { return status_kib("VmHWM"); }

bool reset_peak_resident() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

}  // namespace tripod
