// tripod bench and tripod bench train: options -> bench/train_bench.h
#include "bench/train_bench.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "benchmarks: with no subcommand, every sweep (GEMM, kernels, collectives, layouts, pipeline) and a summary");
  bench->require_subcommand(0, 1);
  add_bench_suite(*bench);
  add_bench_train_command(*bench);
  add_bench_micro_commands(*bench);
  add_bench_overlap_command(*bench);
  add_bench_comm_command(*bench);
  add_bench_layouts_command(*bench);
  add_bench_pipeline_command(*bench);
  add_bench_gemm_rate_command(*bench);
  add_bench_health_command(*bench);
  add_bench_kernel_rate_command(*bench);
  add_bench_ckpt_command(*bench);
}

void add_bench_train_command(CLI::App& bench) {
  auto* train = bench.add_subcommand("train", "time training steps against sgemm measured in the same run");
  auto o = std::make_shared<bench::BenchTrainOptions>();
  train->add_option("-c,--config", o->config, "model preset or config file")->capture_default_str();
  train->add_option("--set", o->overrides, "override a config key (repeatable)");
  require_positive(train->add_option("--batch", o->batch, "sequences per step")->capture_default_str());
  require_positive(train->add_option("--seq-len", o->seq_len, "context length")->capture_default_str());
  require_positive(train->add_option("--steps", o->steps, "timed steps (after one warm-up step)")->capture_default_str());
  require_positive(train->add_option("--gemm-size", o->gemm_size, "size of the square sgemm baseline")->capture_default_str());
  train->add_option("--make-vocab-size-divisible-by", o->vocab_multiple,
                    "pad the vocabulary to a multiple of N (as tripod train's option; e.g. 128)")
      ->capture_default_str();
  add_output_option(*train, "--json", o->json_out, "write the results as JSON here");
  add_backend_option(*train, o->backend);
  train->callback([o]() { bench::run_bench_train(*o); });
}

}  // namespace tripod::cli
