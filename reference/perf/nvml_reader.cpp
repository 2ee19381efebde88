#include "perf/nvml_reader.h"

#include <dlfcn.h>

#include <limits>

#include "core/error.h"

namespace tripod {

// The NVML entry points used, with the C signatures of nvml.h (NVML_SUCCESS is 0; the enum values
// are NVML_TEMPERATURE_GPU = 0 and NVML_CLOCK_SM = 1).
struct NvmlReader::Api {
  using Device = void*;
  struct Memory {
    unsigned long long total, free, used;
  };
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*device_count)(unsigned int*) = nullptr;
  int (*by_index)(unsigned int, Device*) = nullptr;
  int (*by_bus_id)(const char*, Device*) = nullptr;
  int (*name)(Device, char*, unsigned int) = nullptr;
  int (*temperature)(Device, int, unsigned int*) = nullptr;
  int (*power_mw)(Device, unsigned int*) = nullptr;
  int (*clock_mhz)(Device, int, unsigned int*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*energy_mj)(Device, unsigned long long*) = nullptr;
};

namespace {
constexpr int kTemperatureGpu = 0;
constexpr int kClockSm = 1;
constexpr int kNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED
constexpr int kNoPermission = 4;  // NVML_ERROR_NO_PERMISSION

template <typename F>
bool load(void* library, const char* symbol, F& function) {
  function = reinterpret_cast<F>(dlsym(library, symbol));
  return function != nullptr;
}
}  // namespace

NvmlReader::NvmlReader(const std::string& library) : api_(std::make_unique<Api>()) {
  library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char* error = dlerror();
    why_ = str_cat(library, " could not be loaded (", error ? error : "unknown error",
                   "): NVML comes with the NVIDIA driver; no GPU health metrics");
    return;
  }
  Api& a = *api_;
  const char* missing = nullptr;
  if (!load(library_, "nvmlInit_v2", a.init)) missing = "nvmlInit_v2";
  else if (!load(library_, "nvmlShutdown", a.shutdown)) missing = "nvmlShutdown";
  else if (!load(library_, "nvmlErrorString", a.error_string)) missing = "nvmlErrorString";
  else if (!load(library_, "nvmlDeviceGetCount_v2", a.device_count)) missing = "nvmlDeviceGetCount_v2";
  else if (!load(library_, "nvmlDeviceGetHandleByIndex_v2", a.by_index)) missing = "nvmlDeviceGetHandleByIndex_v2";
  else if (!load(library_, "nvmlDeviceGetHandleByPciBusId_v2", a.by_bus_id)) missing = "nvmlDeviceGetHandleByPciBusId_v2";
  else if (!load(library_, "nvmlDeviceGetName", a.name)) missing = "nvmlDeviceGetName";
  else if (!load(library_, "nvmlDeviceGetTemperature", a.temperature)) missing = "nvmlDeviceGetTemperature";
  else if (!load(library_, "nvmlDeviceGetPowerUsage", a.power_mw)) missing = "nvmlDeviceGetPowerUsage";
  else if (!load(library_, "nvmlDeviceGetClockInfo", a.clock_mhz)) missing = "nvmlDeviceGetClockInfo";
  else if (!load(library_, "nvmlDeviceGetMemoryInfo", a.memory)) missing = "nvmlDeviceGetMemoryInfo";
  load(library_, "nvmlDeviceGetTotalEnergyConsumption", a.energy_mj);  // optional (Volta and later)
  if (missing) {
    why_ = str_cat(library, " lacks ", missing, ": no GPU health metrics");
    return;
  }
  const int status = a.init();
  if (status != 0) {
    why_ = str_cat("nvmlInit failed (", a.error_string(status), "): no GPU health metrics");
    return;
  }
  available_ = true;
}

NvmlReader::~NvmlReader() {
  if (available_) api_->shutdown();
  if (library_) dlclose(library_);
}

int NvmlReader::device_count() const {
  if (!available_) return 0;
  unsigned int n = 0;
  return api_->device_count(&n) == 0 ? static_cast<int>(n) : 0;
}

GpuHealth NvmlReader::read_bus_id(const std::string& bus_id) const {
  check(available_, "NVML: ", why_);
  Api::Device device = nullptr;
  const int status = api_->by_bus_id(bus_id.c_str(), &device);
  TRIPOD_CHECK(status == 0, "NVML: no GPU with PCI bus id ", bus_id, " (", api_->error_string(status), ")");
  return read_handle(device);
}

GpuHealth NvmlReader::read_index(int index) const {
  check(available_, "NVML: ", why_);
  Api::Device device = nullptr;
  const int status = api_->by_index(static_cast<unsigned int>(index), &device);
  TRIPOD_CHECK(status == 0, "NVML: no GPU ", index, " (", api_->error_string(status), ")");
  return read_handle(device);
}

GpuHealth NvmlReader::read_handle(void* device) const {
  const Api& a = *api_;
  GpuHealth h;
  // A query this device refuses (NOT_SUPPORTED, NO_PERMISSION: a MIG slice, some containers) leaves
  // its field NaN and is named in h.refused; the others are still read. Any other failure (the GPU
  // lost, NVML uninitialised) throws, naming the query.
  auto read = [&](int status, const char* what) {
    if (status == 0) return true;
    if (status == kNotSupported || status == kNoPermission) {
      h.refused.push_back(str_cat(what, ": ", a.error_string(status)));
      return false;
    }
    fail("NVML: ", what, ": ", a.error_string(status));
  };
  constexpr double refused = std::numeric_limits<double>::quiet_NaN();
  char name[96] = {};
  if (read(a.name(device, name, sizeof name), "nvmlDeviceGetName")) h.name = name;
  unsigned int value = 0;
  h.temperature_c = read(a.temperature(device, kTemperatureGpu, &value), "nvmlDeviceGetTemperature") ? value : refused;
  h.power_w = read(a.power_mw(device, &value), "nvmlDeviceGetPowerUsage") ? value / 1000.0 : refused;
  h.sm_clock_mhz = read(a.clock_mhz(device, kClockSm, &value), "nvmlDeviceGetClockInfo") ? value : refused;
  Api::Memory memory{};
  const bool has_memory = read(a.memory(device, &memory), "nvmlDeviceGetMemoryInfo");
  h.memory_used_mib = has_memory ? static_cast<double>(memory.used) / (1024.0 * 1024.0) : refused;
  h.memory_total_mib = has_memory ? static_cast<double>(memory.total) / (1024.0 * 1024.0) : refused;
  // No counter (pre-Volta, or refused): -1, as every caller reads "none".
  unsigned long long millijoules = 0;
  if (a.energy_mj && a.energy_mj(device, &millijoules) == 0) h.energy_joules = static_cast<double>(millijoules) / 1000.0;
  return h;
}

}  // namespace tripod
