// The peak that a run's MFU is taken against, for all of its ranks together. Each rank's peak
// (perf/backend_peak.h) is that of the arithmetic one process sees; ranks that share hardware share
// its peak:
//   - ranks on one device (a GPU that 2 staged ranks share) count its peak once: each rank counted
//     it, and 2 ranks on one H100 were held against two H100s;
//   - ranks on one machine's CPUs count at most their share of them: 4 unbound one-thread ranks on
//     2 CPUs were held against 4 cores, halving the MFU.
// A stated peak (train.peak_tflops, --peak-tflops > 0) is per rank, as it says, and is not shared.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "perf/device_peak.h"

namespace tripod {

struct WorldPeak {
  double flops = 0;  // of every rank together (0: unknown)
  std::string text;  // "4 x 0.147 TFLOP/s", "1 device x 989.5 TFLOP/s (2 ranks share it)", ...
};

// Collective over `world` (nullptr: one process). `rank_peak` is this rank's own peak.
WorldPeak world_peak(Communicator* world, const Backend& backend, const PeakFlops& rank_peak, bool stated);

// The pure parts, for the tests. The devices among the ranks' "host|PCI bus id" texts.
int distinct_devices(const std::vector<std::string>& host_devices);
// A CPU rank's peak when `local_ranks` ranks share `machine_cpus` CPUs: its `counted_cores` (its
// threads, at most its CPUs) cut to its share of the machine's.
double shared_cpu_peak(double rank_flops, int counted_cores, int machine_cpus, int local_ranks);

}  // namespace tripod
