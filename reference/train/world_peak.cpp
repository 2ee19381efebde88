#include "train/world_peak.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "comm/core_sharing.h"
#include "comm/host_collectives.h"
#include "core/host_cpus.h"

namespace tripod {
namespace {

std::string tflops_text(double flops) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f TFLOP/s", flops / 1e12);
  return text;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

int distinct_devices(const std::vector<std::string>& host_devices) {
  return static_cast<int>(std::set<std::string>(host_devices.begin(), host_devices.end()).size());
}

double shared_cpu_peak(double rank_flops, int counted_cores, int machine_cpus, int local_ranks) {
  const double share = static_cast<double>(machine_cpus) / std::max(local_ranks, 1);
  const double cores = std::max(counted_cores, 1);
  return share < cores ? rank_flops * share / cores : rank_flops;
}

WorldPeak world_peak(Communicator* world, const Backend& backend, const PeakFlops& rank_peak, bool stated) {
  const int ranks = world ? world->size() : 1;
  const WorldPeak each{rank_peak.flops * ranks, std::to_string(ranks) + " x " + tflops_text(rank_peak.flops)};
  if (!world || ranks == 1 || stated) return each;
  // Agreed, as every branch below is collective: a rank on a device the peak table lacks (peak 0)
  // returning alone left the others waiting in the collective.
  if (all_reduce_value(*world, rank_peak.flops > 0 ? 0.0 : 1.0, ReduceOp::Max) != 0) return each;
  const std::string device = backend.device_bus_id();
  // Every rank runs the same backend, so all take the same branch (the collectives match).
  if (!device.empty()) {
    const int devices = distinct_devices(all_gather_text(*world, host_name() + "|" + device));
    if (devices == ranks) return each;
    return {rank_peak.flops * devices, str_cat(devices, devices == 1 ? " device" : " devices", " x ",
                                               tflops_text(rank_peak.flops), " (", ranks, " ranks share ",
                                               devices == 1 ? "it" : "them", ")")};
  }
  const std::optional<CoreShare> share = process_core_share();
  const int counted = std::min(omp_get_max_threads(), available_cores());
  const double mine = share ? shared_cpu_peak(rank_peak.flops, counted, share->machine_cpus, share->local_ranks)
                            : rank_peak.flops;
  // Unchanged unless some rank's share cut its peak (each rank measures its own clock, so the sum
  // of unshared peaks is not this rank's times the ranks).
  if (all_reduce_value(*world, mine < rank_peak.flops ? 1.0 : 0.0, ReduceOp::Max) == 0) return each;
  const double total = all_reduce_value(*world, mine, ReduceOp::Sum);
  return {total, str_cat(tflops_text(total), " (", ranks, " ranks of ", tflops_text(rank_peak.flops),
                         " each, sharing their machines' CPUs)")};
}

}  // namespace tripod
