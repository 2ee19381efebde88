// GPU health from NVML: temperature, power, SM clock, memory used and the energy counter of one
// GPU. The NVML header is not part of our CUDA toolkit and the library comes with the driver, not
// the toolkit, so libnvidia-ml.so.1 is loaded at run time (dlopen) and its few functions are
// declared here. Where it is absent (no driver, a container without it) the reader says so, in
// words, and every caller goes on without health metrics; it never fails a run.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace tripod {

// A reading the device refuses (a MIG slice, some containers refuse power or temperature) is NaN
// and its query named in `refused`; the rest are still read.
struct GpuHealth {
  double temperature_c = 0;   // GPU die
  double power_w = 0;         // board power draw
  double sm_clock_mhz = 0;
  double memory_used_mib = 0;
  double memory_total_mib = 0;
  double energy_joules = -1;  // counter since the driver loaded; -1: none (pre-Volta, or refused)
  std::string name;           // "NVIDIA H200"; empty if refused
  std::vector<std::string> refused;  // "nvmlDeviceGetPowerUsage: Not Supported", one per refused query
};

class NvmlReader {
 public:
  // Loads `library` and initialises NVML. Never throws: available() and why_unavailable() tell.
  explicit NvmlReader(const std::string& library = "libnvidia-ml.so.1");
  ~NvmlReader();
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  bool available() const { return available_; }
  // "libnvidia-ml.so.1 could not be loaded (…): no GPU health metrics" and the like.
  const std::string& why_unavailable() const { return why_; }
  int device_count() const;

  // The GPU with this PCI bus id (Backend::device_bus_id), or index in NVML's order. Throws
  // tripod::Error naming the call when NVML is unavailable, has no such GPU, or fails otherwise
  // than by refusing a query (GpuHealth::refused).
  GpuHealth read_bus_id(const std::string& bus_id) const;
  GpuHealth read_index(int index) const;

 private:
  struct Api;
  GpuHealth read_handle(void* device) const;
  void* library_ = nullptr;
  std::unique_ptr<Api> api_;
  bool available_ = false;
  std::string why_;
};

}  // namespace tripod
