// tripod bench comm [COLLECTIVE] (under mpirun): nccl-tests for the Communicator. This file only
// registers the flags; the benchmark itself is the commbench library (commbench/run.h), which
// checks them, runs the collectives and prints nccl-tests' text.
#include <memory>

#include "cli/commands.h"
#include "commbench/run.h"

namespace tripod::cli {
namespace {

using commbench::CommBenchOptions;

// nccl-tests' flags (commbench/plan.h describes them), plus the 3D-layout groups and --backend.
void add_comm_bench_options(CLI::App& cmd, CommBenchOptions& o) {
  cmd.add_option("collective", o.collective,
                 "all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv, all, or a "
                 "comma-separated list of them (one launch)")
      ->capture_default_str();
  cmd.add_option("-b,--minbytes", o.min_bytes, "smallest size in bytes (K/M/G suffixes)")->capture_default_str();
  cmd.add_option("-e,--maxbytes", o.max_bytes, "largest size in bytes")->capture_default_str();
  cmd.add_option("-i,--stepbytes", o.step_bytes, "fixed increment between sizes")->capture_default_str();
  cmd.add_option("-f,--stepfactor", o.step_factor, "multiplication factor between sizes (wins if > 1)")
      ->capture_default_str();
  cmd.add_option("-n,--iters", o.iters, "timed iterations per size")->capture_default_str();
  cmd.add_option("-w,--warmup_iters", o.warmup_iters, "untimed iterations before them")->capture_default_str();
  cmd.add_option("-c,--check", o.check_iters, "checked calls per size (0: no check)")->capture_default_str();
  cmd.add_option("-o,--op", o.op, "sum, min, max, avg or all (prod is not supported)")->capture_default_str();
  cmd.add_option("-d,--datatype", o.datatype, "float, double, int32, bfloat16 or all")->capture_default_str();
  cmd.add_option("-r,--root", o.root, "root rank of broadcast/reduce within the group, or all")->capture_default_str();
  cmd.add_option("-a,--average", o.average, "time reported: 0 rank 0's, 1 mean, 2 min, 3 max over all ranks")
      ->capture_default_str();
  cmd.add_option("--tp", o.tp, "tensor-parallel size of a 3D layout over the launched ranks");
  cmd.add_option("--pp", o.pp, "pipeline-parallel size");
  cmd.add_option("--dp", o.dp, "data-parallel size");
  cmd.add_option("--group", o.group, "with a layout: benchmark every tp, dp or pp group at once")
      ->capture_default_str();
  add_output_option(cmd, "-J,--json", o.json_out, "write one record per result as JSON here");
  add_backend_option(cmd, o.backend);
  add_comm_options(cmd, o.comm);
  cmd.add_flag("--async", o.async, "use the _async forms + wait() instead of the blocking calls");
  cmd.add_flag("--inject-error", o.inject_error, "debug: corrupt one received element to prove the check fails")
      ->group("");  // hidden from --help
}

}  // namespace

void add_bench_comm_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("comm", "nccl-tests-style collective benchmark on the Communicator (run under mpirun)");
  auto options = std::make_shared<CommBenchOptions>();
  add_comm_bench_options(*cmd, *options);
  cmd->callback([options]() { commbench::run_bench_comm(*options); });
}

}  // namespace tripod::cli
