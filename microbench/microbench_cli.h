// The command-line options of the microbenchmarks, for the programs that parse them (the tripod
// CLI and the standalone benchmark programs): CLI11 stays with the executables.
#pragma once
#include <CLI/CLI.hpp>

#include "microbench/microbench.h"

namespace tripod::microbench {

// Adds MicrobenchOptions to a CLI11 command (which must allow extras: they become benchmark_args).
inline void add_microbench_options(CLI::App& command, MicrobenchOptions& o) {
  command.allow_extras();  // the --benchmark_* flags, for Google Benchmark
  command.add_option("-m,--model,-c,--config", o.model, "model preset or config file (gives the shapes)")
      ->capture_default_str();
  command.add_option("--set", o.overrides, "override a config key, e.g. model.vocab_size=32000 (repeatable)");
  command.add_option("--tp", o.tp, "tensor-parallel size: benchmark one rank's share")->capture_default_str();
  command.add_option("--batch", o.batch, "sequences per micro-batch (default: the preset's micro-batch)");
  command.add_option("--seq-len", o.seq_len, "context length (default: the preset's train.seq_len)");
  command.add_option("--dtype", o.dtype, "kernels and layer GEMMs: fp32 or fp64")->capture_default_str();
  command.add_option("--stream-mib", o.stream_mib, "STREAM array size in MiB (default: from the L3 size)");
  command.add_option("--backend", o.backend,
                     "where tensors live and compute: cpu or emulated (these suites hold the CPU's peak and STREAM "
                     "bandwidth; on a GPU: bench gemm-rate / kernel-rate --backend cuda)")
      ->capture_default_str();
  command.add_flag("--quick", o.quick, "fewer sizes and --benchmark_min_time=0.05 (about 20 s)");
  command.add_option("--json", o.json_out, "write the summary here (merged with other suites' summaries)");
  command.footer(
      "Google Benchmark's flags pass through, e.g. --benchmark_filter=REGEX --benchmark_min_time=SECONDS "
      "--benchmark_repetitions=N --benchmark_out=FILE --benchmark_out_format=json|csv|console.");
}

}  // namespace tripod::microbench
