// GPU health in the per-step metrics, from NVML (perf/nvml_reader.h), for runs whose backend is a
// GPU: each step record of rank 0 gains
//   "gpu": {"temperature_c", "power_w", "sm_clock_mhz", "memory_used_mib"}   (rank 0's GPU, at the step's end)
//   "energy_joules": rank 0's GPU's energy counter over the step (NVML updates it every few tens of ms,
//                    so short steps read lumpy values; sums over many steps are exact),
//   "tokens_per_joule": the step's tokens / (that energy x ranks), i.e. assuming every GPU draws
//                    what rank 0's does.
// Host backends get nothing; a GPU without NVML gets one start-up line saying why. A reading the
// GPU refuses (a MIG slice, a container) is left out of "gpu", and the start-up line names it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "perf/nvml_reader.h"

namespace tripod {

class GpuHealthLog {
 public:
  explicit GpuHealthLog(const Backend& backend);
  // For the start-up report: "" (host backend), the GPU NVML reads, or why there is no reading.
  std::string startup_line() const;
  void step_begin();
  // Reads the GPU as the step ends, before any evaluation or save that follows it: those are no part
  // of the step's energy (an evaluation's forward passes doubled it on evaluation steps).
  void step_end();
  void add_to(nlohmann::json& record, int64_t step_tokens, int ranks);  // step_end's reading
  double total_energy_joules() const { return total_energy_; }  // rank 0's GPU over the recorded steps

 private:
  void stop_reading(const Error& e);
  std::string bus_id_;
  std::unique_ptr<NvmlReader> nvml_;  // null for host backends
  std::string gpu_name_, error_;
  std::string refused_;  // the queries the GPU refused at start-up, for the start-up line
  double energy_at_begin_ = -1, total_energy_ = 0;
  std::optional<GpuHealth> at_end_;  // step_end's reading; none when it failed
};

}  // namespace tripod
