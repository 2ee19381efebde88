#include "perf/process_memory.h"

#include <malloc.h>

#include <fstream>
#include <string>

#include "core/block_cache.h"

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

ResidentStart start_resident_measurement() {
  host_block_cache().trim();
  malloc_trim(0);
  ResidentStart start;
  start.base_bytes = resident_bytes();
  start.mark_reset = reset_peak_resident();
  return start;
}

}  // namespace tripod
