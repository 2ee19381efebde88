// tripod bench layouts: options -> bench/layouts_bench.h
#include "bench/layouts_bench.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_layouts_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("layouts", "end-to-end training MFU per parallel layout (under mpirun)");
  auto o = std::make_shared<bench::LayoutsOptions>();
  cmd->add_option("-c,--config", o->config, "model preset or config file")->capture_default_str();
  cmd->add_option("--set", o->overrides, "override a config key (repeatable)");
  cmd->add_option("--zero", o->zero, "ZeRO stages to time (data parallelism over every rank)")->capture_default_str();
  cmd->add_option("--layouts", o->layouts, "layouts to time instead, named as tripod conform names them "
                                           "(e.g. tp1-pp2-dp1-z0-mb8-1f1b)");
  cmd->add_option("--recompute", o->recompute, "activation recomputation modes to time each layout in: none, "
                  "selective, full (e.g. --recompute none selective full)")->capture_default_str();
  // (0 is no default here: a batch or vocabulary of 0 ran, or failed naming a config key)
  require_positive(cmd->add_option("--batch", o->batch_per_rank, "sequences per rank")->capture_default_str());
  require_positive(cmd->add_option("--seq-len", o->seq_len, "context length")->capture_default_str());
  require_positive(cmd->add_option("--vocab", o->vocab, "vocabulary of the random tokens (>= 2)")->capture_default_str());
  require_positive(cmd->add_option("--steps", o->steps, "timed steps per layout (after one warm-up)")->capture_default_str());
  require_positive(cmd->add_option("--rounds", o->rounds, "time the whole list this many times, in alternating order, "
                                   "and report each layout's median round with the range")->capture_default_str());
  require_non_negative(cmd->add_option("--peak-tflops", o->peak_tflops, "peak per rank (default: the backend's at the step's precision: a GPU's datasheet peak, the CPU's nominal peak of its threads)"));
  add_output_option(*cmd, "--json", o->json_out, "write the results as JSON here");
  add_backend_option(*cmd, o->backend);
  add_comm_options(*cmd, o->comm);
  cmd->callback([o]() { bench::run_layouts(*o); });
}

}  // namespace tripod::cli
