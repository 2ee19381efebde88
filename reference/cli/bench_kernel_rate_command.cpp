// tripod bench kernel-rate: GPT-2's memory-bound operations in GB/s and as a percentage of a
// device-to-device copy measured in the same run -> bench/kernel_rate_bench.h
//   tripod bench kernel-rate --backend cuda --tokens 8192 --json k.json
#include "bench/kernel_rate_bench.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_kernel_rate_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("kernel-rate", "memory-bound kernels in GB/s and % of a copy, through the backend");
  auto o = std::make_shared<bench::KernelRateOptions>();
  add_backend_option(*cmd, o->backend);
  cmd->add_option("--dtype", o->dtype, "fp32 or fp64")->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "N rows (B*T)")->capture_default_str();
  cmd->add_option("--channels", o->channels, "C, the model width")->capture_default_str();
  cmd->add_option("--vocab", o->vocab, "V, the logits' width (cross-entropy)")->capture_default_str();
  cmd->add_option("--context", o->context, "T, attention's sequence length (at most --tokens; divides it)")
      ->capture_default_str();
  cmd->add_option("--heads", o->heads, "H, attention's heads (0: C / 64)")->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "timed regions per kernel (median and best reported)")->capture_default_str();
  require_non_negative(cmd->add_option("--min-time-ms", o->min_time_ms, "shortest timed region")->capture_default_str());
  add_output_option(*cmd, "--json", o->json_out, "write the results as JSON here");
  cmd->callback([o]() { bench::run_kernel_rate(*o); });
}

}  // namespace tripod::cli
