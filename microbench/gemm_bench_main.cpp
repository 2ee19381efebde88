// tripod_gemm_bench: the GEMM microbenchmark as a standalone Google Benchmark program.
// Same options as `tripod bench gemm`; every --benchmark_* flag is Google Benchmark's.
#include "microbench/standalone_main.h"

int main(int argc, char** argv) {
  return tripod::microbench::standalone_main(tripod::microbench::Suite::Gemm, argc, argv,
                                             "tripod_gemm_bench: sgemm/dgemm throughput and one layer's GEMMs");
}
