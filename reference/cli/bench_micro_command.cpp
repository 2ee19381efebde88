// tripod bench gemm | kernels: the Google Benchmark suites of microbench/, with the same options
// and --benchmark_* flags as the standalone tripod_gemm_bench and tripod_kernel_bench programs.
#include "cli/commands.h"
#include "core/error.h"

#ifdef TRIPOD_HAVE_MICROBENCH
#include "microbench/microbench_cli.h"
#endif

namespace tripod::cli {

#ifdef TRIPOD_HAVE_MICROBENCH

namespace {

void add_suite(CLI::App& bench, const char* name, const char* description, microbench::Suite suite) {
  auto* command = bench.add_subcommand(name, description);
  auto options = std::make_shared<microbench::MicrobenchOptions>();
  microbench::add_microbench_options(*command, *options);
  command->callback([command, options, suite] {
    options->benchmark_args = command->remaining();
    const int status = microbench::run_microbench(suite, *options);
    if (status != 0) throw CLI::RuntimeError(status);  // Google Benchmark has said why
  });
}

}  // namespace

void add_bench_micro_commands(CLI::App& bench) {
  add_suite(bench, "gemm", "sgemm/dgemm throughput: square sizes and one transformer layer's GEMMs",
            microbench::Suite::Gemm);
  add_suite(bench, "kernels", "LayerNorm, GELU, attention, cross-entropy, AdamW against STREAM bandwidth",
            microbench::Suite::Kernels);
}

#else  // built with TRIPOD_BUILD_BENCH=OFF: say so instead of pretending the commands do not exist

void add_bench_micro_commands(CLI::App& bench) {
  for (const char* name : {"gemm", "kernels"}) {
    auto* command = bench.add_subcommand(name, "(not built: configure with -DTRIPOD_BUILD_BENCH=ON)");
    command->allow_extras();
    command->callback(
        [name] { fail("tripod bench ", name, ": this build has no microbenchmarks (TRIPOD_BUILD_BENCH=OFF)"); });
  }
}

#endif

}  // namespace tripod::cli
