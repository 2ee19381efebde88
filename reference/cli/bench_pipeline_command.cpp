// tripod bench pipeline: options -> bench/pipeline_bench.h
#include "bench/pipeline_bench.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_pipeline_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("pipeline", "measured vs theoretical pipeline bubble on a synthetic workload (mpirun)");
  auto o = std::make_shared<bench::PipelineBenchOptions>();
  cmd->add_option("--microbatches", o->microbatches, "comma-separated micro-batch counts")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--forward-ms", o->forward_ms, "forward time per stage (backward: twice)")->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "runs per schedule; the median is reported")->capture_default_str();
  add_output_option(*cmd, "--json", o->json_out, "write the results as JSON here");
  add_output_option(*cmd, "--trace", o->trace_out, "write the 1F1B timeline (largest m) as JSON here");
  add_backend_option(*cmd, o->backend);
  add_comm_options(*cmd, o->comm);
  cmd->callback([o]() { bench::run_pipeline_bench(*o); });
}

}  // namespace tripod::cli
