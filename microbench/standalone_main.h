// The body of the standalone benchmark programs' main(): our options through CLI11, everything
// it does not know handed to Google Benchmark (as BENCHMARK_MAIN would), errors printed as the
// tripod CLI prints them.
#pragma once
#include <cstdio>

#include "backend/cpu/blas_kernels.h"
#include "core/error.h"
#include "microbench/microbench_cli.h"
#include "process/load_time_settings.h"

namespace tripod::microbench {

inline int standalone_main(Suite suite, int argc, char** argv, const char* description) {
  execute_again_with(cpu::openblas_kernel_settings(), argv);  // as tripod does: the CPU's own GEMM kernels
  CLI::App app{description};
  MicrobenchOptions options;
  add_microbench_options(app, options);
  try {
    app.parse(argc, argv);
    options.benchmark_args = app.remaining();
    options.program = argv[0];
    return run_microbench(suite, options);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", argv[0], e.what());
    return 1;
  }
}

}  // namespace tripod::microbench
