// tripod bench ckpt: options -> bench/ckpt_bench.h
#include "bench/ckpt_bench.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_ckpt_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("ckpt", "checkpoint write rate vs the disk's, and the training stall of an asynchronous save vs a synchronous one");
  auto o = std::make_shared<bench::BenchCkptOptions>();
  cmd->add_option("-c,--config", o->config, "model preset or config file (model.vocab_size 0 becomes 8192)")->capture_default_str();
  cmd->add_option("--set", o->overrides, "override a config key (repeatable)");
  require_positive(cmd->add_option("--batch", o->batch, "sequences per training step")->capture_default_str());
  require_positive(cmd->add_option("--seq-len", o->seq_len, "context length")->capture_default_str());
  require_positive(
      cmd->add_option("--repeats", o->repeats, "measurements of each kind (medians are reported)")->capture_default_str());
  cmd->add_option("--dir", o->dir, "write here (the disk to measure; must not hold a ckpt folder); default: a "
                  "temporary folder. What the bench writes is removed after it, unless --keep");
  cmd->add_flag("--keep", o->keep, "leave the checkpoints it wrote in DIR/ckpt (e.g. to `tripod ckpt verify` them)");
  add_output_option(*cmd, "--json", o->json_out, "write the results as JSON here");
  add_backend_option(*cmd, o->backend);
  cmd->callback([o]() { bench::run_bench_ckpt(*o); });
}

}  // namespace tripod::cli
