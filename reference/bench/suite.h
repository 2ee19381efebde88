// `tripod bench` with no subcommand: the one command for a new node. It runs, each in its own
// process (Google Benchmark's registry is global, and the MPI parts need their own launch):
//   1. the GEMM sweep         tripod bench gemm     (squares + the layer shapes of a model;
//                             on --backend cuda: tripod bench gemm-rate, against the device's peak)
//   2. the kernel sweep       tripod bench kernels  (with STREAM copy/triad in the same run;
//                             on --backend cuda: tripod bench kernel-rate, against a device copy)
//   3. the collective sweep   mpirun -np R tripod bench comm all   (nccl-tests format)
//   4. end-to-end training    mpirun -np R tripod bench layouts    (MFU per ZeRO stage)
//   5. pipeline bubble        mpirun -np R tripod bench pipeline   (measured vs theory, timeline)
// then merges the results into OUT/bench.json, prints a summary (best busbw per collective,
// GEMM TFLOP/s and % of peak, MFU per layout) and draws OUT/plots/ with reports/plot_bench.py.
// Each step's full output is in OUT/<step>.log. Exit 1 if any step failed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tripod::bench {

struct SuiteOptions {
  bool quick = false;
  std::string out = "runs/bench";
  int ranks = 0;  // 0: the cores this process may use, at least 2
  std::string mpirun = "mpirun";
  std::string backend = "cpu";  // passed to every step
  std::string comm = "auto";    // passed to the multi-rank steps (staged: several ranks on one GPU)
};

void run_suite(const SuiteOptions& options);

}  // namespace tripod::bench
