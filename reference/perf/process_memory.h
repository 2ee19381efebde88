// The process's resident memory as the kernel counts it (Linux /proc/self/status), next to what the
// allocator and the memory report say: the figures `bench layouts` and `bench train` hold against
// the accounting.
#pragma once
#include <cstddef>

namespace tripod {

std::size_t resident_bytes();       // VmRSS now
std::size_t peak_resident_bytes();  // VmHWM: the high-water mark since start or the last reset
// Starts a new high-water mark at the current resident size (Linux >= 4.0: clear_refs "5");
// false where the kernel does not allow it (the mark then covers the whole process).
bool reset_peak_resident();

// A measurement's start: memory freed before it is given back (the host block cache's kept blocks,
// malloc's free pages), so that it counts in neither the base nor the peak, then the mark reset.
struct ResidentStart {
  std::size_t base_bytes = 0;  // resident now
  bool mark_reset = false;     // reset_peak_resident's answer
};
ResidentStart start_resident_measurement();

}  // namespace tripod
