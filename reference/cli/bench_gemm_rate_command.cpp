// tripod bench gemm-rate: GEMM TFLOP/s through the Backend interface and % of the device's peak,
// on squares and GPT-2 124M's layer shapes -> bench/gemm_rate_bench.h
//   tripod bench gemm-rate --backend cuda --dtype bf16 --sizes 4096,8192 --shapes gpt2 --json g.json
#include "bench/gemm_rate_bench.h"
#include "cli/commands.h"

namespace tripod::cli {

void add_bench_gemm_rate_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("gemm-rate", "GEMM TFLOP/s and % of peak through the backend: squares and GPT-2 shapes");
  auto o = std::make_shared<bench::GemmRateOptions>();
  add_backend_option(*cmd, o->backend);
  cmd->add_option("--dtype", o->dtype, "bf16 (bf16 A/B, fp32 accumulate and C), bf16-mixed (fp32 tensors the backend rounds to bf16, as the trainer's GEMMs), fp32 (TF32 off) or fp64")
      ->capture_default_str();
  cmd->add_option("--c-dtype", o->c_dtype, "C's dtype: bf16 with --dtype bf16 (C rounded once from the fp32 sums, as "
                                           "PyTorch's bf16 matmul); default fp32 for bf16, else the --dtype");
  cmd->add_option("--sizes", o->sizes, "square sizes n (n x n x n), comma-separated; default 1024,4096,8192 "
                                       "when --shapes is not given")
      ->delimiter(',');
  cmd->add_option("--shapes", o->shapes, "gpt2: GPT-2 124M's layer GEMMs (forward, dX, dW) for --tokens rows");
  cmd->add_option("--tokens", o->tokens, "B*T rows of the GPT-2 shapes")->capture_default_str();
  cmd->add_option("--vocab", o->vocab, "the LM head's width in the GPT-2 shapes (50304: padded to a multiple of 128)")
      ->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "timed regions per GEMM (median and best reported)")->capture_default_str();
  cmd->add_option("--min-time-ms", o->min_time_ms, "shortest timed region: small GEMMs run several times in one")
      ->capture_default_str();
  require_non_negative(cmd->add_option("--peak-tflops", o->peak_tflops, "state the peak instead of the device table's"));
  cmd->add_option("--peak-device", o->peak_device,
                  "hold the rates against this device's datasheet peak (perf/device_peak.cpp), e.g. \"NVIDIA H200\"");
  add_output_option(*cmd, "--json", o->json_out, "write the results as JSON here");
  cmd->callback([o]() { bench::run_gemm_rate(*o); });
}

}  // namespace tripod::cli
