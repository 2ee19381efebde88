#include "train/gpu_health_log.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "core/error.h"

namespace tripod {

GpuHealthLog::GpuHealthLog(const Backend& backend) : bus_id_(backend.device_bus_id()) {
  if (bus_id_.empty()) return;
  nvml_ = std::make_unique<NvmlReader>();
  if (!nvml_->available()) return;
  try {
    const GpuHealth h = nvml_->read_bus_id(bus_id_);
    gpu_name_ = h.name.empty() ? "a GPU NVML will not name" : h.name;
    for (const std::string& why : h.refused) refused_ += (refused_.empty() ? "" : "; ") + why;
  } catch (const Error& e) {
    error_ = e.what();
  }
}

std::string GpuHealthLog::startup_line() const {
  if (!nvml_) return "";
  if (!nvml_->available()) return "GPU health: none (" + nvml_->why_unavailable() + ")";
  if (!error_.empty()) return "GPU health: none (" + error_ + ")";
  return "GPU health: " + gpu_name_ + " at " + bus_id_ + " read through NVML every step (temperature, power, SM clock, "
         "memory, energy)" + (refused_.empty() ? "" : "; the GPU refuses " + refused_);
}

// A failed reading (NVML can refuse for a moment, or lose the GPU) stops the health metrics with a
// line saying why; it never ends the run, as the header promises.
void GpuHealthLog::stop_reading(const Error& e) {
  error_ = e.what();
  std::fprintf(stderr, "GPU health: no more readings (%s); training goes on without them\n", error_.c_str());
}

void GpuHealthLog::step_begin() {
  if (!nvml_ || !nvml_->available() || !error_.empty()) return;
  try {
    energy_at_begin_ = nvml_->read_bus_id(bus_id_).energy_joules;
  } catch (const Error& e) {
    stop_reading(e);
  }
}

void GpuHealthLog::step_end() {
  at_end_.reset();
  if (!nvml_ || !nvml_->available() || !error_.empty()) return;
  try {
    at_end_ = nvml_->read_bus_id(bus_id_);
  } catch (const Error& e) {
    stop_reading(e);
  }
}

void GpuHealthLog::add_to(nlohmann::json& record, int64_t step_tokens, int ranks) {
  if (!at_end_ || !error_.empty()) return;
  const GpuHealth& h = *at_end_;
  // A reading this GPU refuses (NaN: a MIG slice, a container) is left out; the others are kept.
  nlohmann::json gpu = nlohmann::json::object();
  const std::pair<const char*, double> readings[] = {{"temperature_c", h.temperature_c},
                                                     {"power_w", h.power_w},
                                                     {"sm_clock_mhz", h.sm_clock_mhz},
                                                     {"memory_used_mib", h.memory_used_mib}};
  for (const auto& [key, value] : readings)
    if (!std::isnan(value)) gpu[key] = value;
  record["gpu"] = gpu;
  if (h.energy_joules < 0 || energy_at_begin_ < 0) return;  // no energy counter on this GPU
  const double joules = h.energy_joules - energy_at_begin_;
  total_energy_ += joules;
  record["energy_joules"] = joules;
  if (joules > 0) record["tokens_per_joule"] = static_cast<double>(step_tokens) / (joules * ranks);
}

}  // namespace tripod
