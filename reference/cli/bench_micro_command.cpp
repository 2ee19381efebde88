// Placeholder: GEMM and kernel microbenchmarks (tripod bench gemm | kernels) are being written.
#include "cli/commands.h"
namespace tripod::cli {
void add_bench_micro_commands(CLI::App&) {}
}  // namespace tripod::cli
