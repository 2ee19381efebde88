// Tripod's microbenchmarks: GEMM throughput and the memory-bound transformer kernels, run with
// Google Benchmark. One entry point serves the standalone programs (tripod_gemm_bench,
// tripod_kernel_bench) and the CLI (tripod bench gemm | kernels), so both accept the same
// options and every --benchmark_* flag.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tripod::microbench {

enum class Suite { Gemm, Kernels };

struct MicrobenchOptions {
  std::string model = "gpt2-124m";          // preset or config file: gives the shapes benchmarked
  std::vector<std::string> overrides;       // --set section.key=value
  int64_t tp = 1;                           // tensor-parallel size: each rank's share of the shapes
  int64_t batch = 0;                        // sequences per micro-batch; 0: the preset's micro-batch
  int64_t seq_len = 0;                      // 0: the preset's train.seq_len
  std::string dtype = "fp32";               // kernels and layer-shape GEMMs (squares run fp32 and fp64)
  int64_t stream_mib = 0;                   // STREAM array size in MiB; 0: chosen from the cache size
  bool quick = false;                       // fewer sizes, short minimum time: ~20 s per suite
  std::string json_out;                     // our summary JSON (merged into the file under the suite's key)
  std::vector<std::string> benchmark_args;  // --benchmark_* flags, passed to Google Benchmark
  std::string program;                      // how Google Benchmark's messages name us
  std::string backend = "cpu";              // backend/backend_factory.h's names
};


// Registers the suite's benchmarks, runs them, prints the table and a summary, writes the JSON.
// Returns a process exit status. Call once per process (Google Benchmark's registry is global).
int run_microbench(Suite suite, MicrobenchOptions options);

}  // namespace tripod::microbench
