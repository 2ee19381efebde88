// tripod bench overlap: options -> bench/overlap_bench.h
#include "bench/overlap_bench.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_overlap_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("overlap", "DP gradient reduction hidden behind backward (run under mpirun)");
  auto o = std::make_shared<bench::OverlapOptions>();
  cmd->add_option("-c,--config", o->config, "model preset or config file")->capture_default_str();
  cmd->add_option("--set", o->overrides, "override a config key (repeatable)");
  // (a batch or context of 0 timed nothing and printed 0 MiB with exit 0)
  require_positive(cmd->add_option("--batch", o->batch, "sequences per rank")->capture_default_str());
  require_positive(cmd->add_option("--seq-len", o->seq_len, "context length")->capture_default_str());
  require_positive(cmd->add_option("--vocab", o->vocab, "vocabulary size of the random tokens (>= 2)")->capture_default_str());
  cmd->add_option("--bucket-mb", o->bucket_mb, "gradient bucket size in MiB")->capture_default_str();
  require_non_negative(cmd->add_option("--progress-us", o->progress_us,
                  "polling interval of the MPI progress thread measured as a mechanism (0: skip it)")->capture_default_str());
  cmd->add_option("--prefetch", o->prefetch, "ZeRO-3 buckets gathered ahead in the prefetch row")->capture_default_str();
  require_positive(cmd->add_option("--repeats", o->repeats, "timed repetitions of each mode")->capture_default_str());
  add_output_option(*cmd, "--json", o->json_out, "write the results as JSON here");
  add_backend_option(*cmd, o->backend);
  add_comm_options(*cmd, o->comm);
  cmd->callback([o]() { bench::run_overlap(*o); });
}

}  // namespace tripod::cli
