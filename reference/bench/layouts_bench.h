// tripod bench layouts (under mpirun -np N): end-to-end training throughput and MFU of a model for
// several layouts on the launched ranks, on random tokens: data-parallel ZeRO stages (--zero), or
// any tp x pp x dp layouts named as `tripod conform` names them (--layouts tp1-pp2-dp1-z0-mb8-1f1b). MFU counts
// model FLOPs (perf/flops.h) against N x the per-rank peak (the nominal CPU peak of the threads a
// rank uses, or --peak-tflops per rank) and, clearly labelled beside it, against the sgemm rate
// measured on each rank's threads at the start (all ranks at once, as they will train). Each
// layout runs once per activation-recomputation mode asked for (--recompute none,selective,full),
// and reports its allocator's peak and its activation bytes next to the step time. --rounds N
// times the whole list N times in alternating order and reports each layout's median round
// (this machine is shared and noisy: a baseline is compared within one run, by medians).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/world.h"

namespace tripod::bench {

struct LayoutsOptions {
  std::string config = "small";
  std::vector<std::string> overrides;
  std::vector<int> zero = {0, 1, 2, 3};
  std::vector<std::string> layouts;  // conform names; replaces --zero
  // Each layout once per mode (model/recompute.h); empty: once, in the layout name's own mode, or
  // else train.recompute's.
  std::vector<std::string> recompute;
  int64_t batch_per_rank = 4, seq_len = 128, vocab = 8192, steps = 3, rounds = 1;
  double peak_tflops = 0;
  std::string json_out, backend = "cpu";
  CommSettings comm;
};

void run_layouts(const LayoutsOptions& options);

}  // namespace tripod::bench
