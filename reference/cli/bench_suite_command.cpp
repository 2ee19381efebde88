// tripod bench (every sweep): options -> bench/suite.h
#include "bench/suite.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_suite(CLI::App& bench) {
  auto o = std::make_shared<bench::SuiteOptions>();
  bench.add_flag("--quick", o->quick, "short sweeps: about a minute on 2 cores");
  bench.add_option("--out", o->out, "results directory")->capture_default_str();
  bench.add_option("--ranks", o->ranks, "MPI ranks for the collective and training steps (default: cores, >= 2)");
  bench.add_option("--mpirun", o->mpirun, "the MPI launcher")->capture_default_str();
  add_backend_option(bench, o->backend);
  bench.add_option("--comm", o->comm,
                   "the communicator of the multi-rank steps: auto, mpi, staged or nccl (staged: several ranks "
                   "share one GPU, which NCCL refuses)")
      ->capture_default_str();
  bench.callback([o, &bench]() {
    if (bench.get_subcommands().empty()) bench::run_suite(*o);
  });
}

}  // namespace tripod::cli
