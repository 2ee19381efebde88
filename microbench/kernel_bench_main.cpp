// tripod_kernel_bench: the kernel and STREAM microbenchmarks as a standalone Google Benchmark
// program. Same options as `tripod bench kernels`; every --benchmark_* flag is Google Benchmark's.
#include "microbench/standalone_main.h"

int main(int argc, char** argv) {
  return tripod::microbench::standalone_main(tripod::microbench::Suite::Kernels, argc, argv,
                                             "tripod_kernel_bench: memory-bound kernels against STREAM");
}
