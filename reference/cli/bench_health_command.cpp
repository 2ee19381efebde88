// tripod bench health: what NVML reads on every GPU of this node (temperature, power, SM clock,
// memory, energy counter), a few samples apart; a clear error, exit 1, where NVML is absent. A
// reading a GPU refuses (a MIG slice, a container) is "-" and null, its query named once.
//   tripod bench health --samples 3 --interval-ms 500 --json health.json
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
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

// A reading the device refused is NaN in GpuHealth: "-" in the table, null in the JSON.
constexpr double kRefused = std::numeric_limits<double>::quiet_NaN();
std::string reading_text(double value, int decimals) {
  if (std::isnan(value)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}
nlohmann::json reading_json(double value) { return std::isnan(value) ? nlohmann::json() : nlohmann::json(value); }

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
      if (s == 0)
        for (const std::string& why : h.refused) std::printf("# gpu %d refuses %s\n", g, why.c_str());
      std::printf("  %6d %4d %-24s %8s %9s %9s %10s M %10s M %12s\n", s, g, h.name.empty() ? "-" : h.name.c_str(),
                  reading_text(h.temperature_c, 0).c_str(), reading_text(h.power_w, 1).c_str(),
                  reading_text(h.sm_clock_mhz, 0).c_str(), reading_text(h.memory_used_mib, 0).c_str(),
                  reading_text(h.memory_total_mib, 0).c_str(),
                  reading_text(h.energy_joules >= 0 ? h.energy_joules : kRefused, 1).c_str());
      rows.push_back({{"sample", s}, {"gpu", g}, {"name", h.name}, {"temperature_c", reading_json(h.temperature_c)},
                      {"power_w", reading_json(h.power_w)}, {"sm_clock_mhz", reading_json(h.sm_clock_mhz)},
                      {"memory_used_mib", reading_json(h.memory_used_mib)},
                      {"memory_total_mib", reading_json(h.memory_total_mib)},
                      // null where the GPU has no counter (-1 in GpuHealth), as every output writes "none"
                      {"energy_joules", reading_json(h.energy_joules >= 0 ? h.energy_joules : kRefused)},
                      {"refused", h.refused}});
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
