// tripod bench health: what NVML reads on every GPU of this node (temperature, power, SM clock,
// memory, energy counter), a few samples apart; a clear error, exit 1, where NVML is absent.
//   tripod bench health --samples 3 --interval-ms 500 --json health.json
#include <chrono>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/output_file.h"
#include "perf/nvml_reader.h"

namespace tripod::cli {
namespace {

struct HealthOptions {
  int samples = 3;
  int interval_ms = 500;
  std::string library = "libnvidia-ml.so.1", json_out;
};

void run_health(const HealthOptions& o) {
  check(o.samples >= 1 && o.interval_ms >= 0, "--samples must be >= 1 and --interval-ms >= 0");
  const NvmlReader nvml(o.library);
  check(nvml.available(), nvml.why_unavailable());
  const int gpus = nvml.device_count();
  check(gpus > 0, "NVML sees no GPU on this node");
  nlohmann::json rows = nlohmann::json::array();
  std::printf("# %6s %4s %-24s %8s %9s %9s %12s %12s %12s\n", "sample", "gpu", "name", "temp(C)", "power(W)",
              "sm(MHz)", "mem used", "mem total", "energy(J)");
  for (int s = 0; s < o.samples; ++s) {
    if (s > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
    for (int g = 0; g < gpus; ++g) {
      const GpuHealth h = nvml.read_index(g);
      std::printf("  %6d %4d %-24s %8.0f %9.1f %9.0f %10.0f M %10.0f M %12.1f\n", s, g, h.name.c_str(),
                  h.temperature_c, h.power_w, h.sm_clock_mhz, h.memory_used_mib, h.memory_total_mib, h.energy_joules);
      rows.push_back({{"sample", s}, {"gpu", g}, {"name", h.name}, {"temperature_c", h.temperature_c},
                      {"power_w", h.power_w}, {"sm_clock_mhz", h.sm_clock_mhz}, {"memory_used_mib", h.memory_used_mib},
                      {"memory_total_mib", h.memory_total_mib},
                      // null where the GPU has no counter (-1 in GpuHealth), as every output writes "none"
                      {"energy_joules", h.energy_joules >= 0 ? nlohmann::json(h.energy_joules) : nlohmann::json()}});
    }
  }
  std::fflush(stdout);
  if (!o.json_out.empty()) {
    write_output_file(o.json_out,
                      nlohmann::json{{"benchmark", "health"}, {"build", build_info_json()}, {"gpus", gpus},
                                     {"readings", rows}}.dump(1) + "\n",
                      "the readings (--json)");
  }
}

}  // namespace

void add_bench_health_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("health", "GPU temperature, power, SM clock, memory and energy from NVML");
  auto o = std::make_shared<HealthOptions>();
  cmd->add_option("--samples", o->samples, "readings per GPU")->capture_default_str();
  cmd->add_option("--interval-ms", o->interval_ms, "milliseconds between readings")->capture_default_str();
  cmd->add_option("--library", o->library, "the NVML library to load")->capture_default_str();
  add_output_option(*cmd, "--json", o->json_out, "write the readings as JSON here");
  cmd->callback([o]() { run_health(*o); });
}

}  // namespace tripod::cli
