// Each subcommand group of the `tripod` program registers itself on the CLI11 app.
// A registered callback throws tripod::Error on bad input; main() prints it and exits non-zero.
#pragma once
#include <CLI/CLI.hpp>

#include "comm/world.h"

namespace tripod::cli {

void add_train_command(CLI::App& app);    // tripod train
void add_data_commands(CLI::App& app);    // tripod data prepare | synthetic | inspect
void add_export_commands(CLI::App& app);  // tripod export hf
void add_ckpt_commands(CLI::App& app);    // tripod ckpt verify | info | upgrade
void add_bench_commands(CLI::App& app);   // tripod bench train | gemm | kernels | ...
void add_scale_commands(CLI::App& app);   // tripod scale run | fit
void add_conform_command(CLI::App& app);  // tripod conform
void add_schedule_command(CLI::App& app);  // tripod schedule: print and simulate a pipeline schedule
void add_check_backend_command(CLI::App& app);  // tripod check-backend: every op against the CPU backend
void add_launch_command(CLI::App& app);  // tripod launch: restart a failed job from its latest checkpoint
void add_golden_commands(CLI::App& app);  // tripod golden | golden run | golden check: bundles for other frameworks
void add_import_command(CLI::App& app);   // tripod import nccl-tests | megatron | torchtitan: other tools' output
void add_report_command(CLI::App& app);   // tripod report: one HTML page from a results directory
void add_version_flag(CLI::App& app);     // tripod --version: the build and its libraries

// --backend NAME (default cpu), listing the backends built into this binary; the command makes
// it with backend/backend_factory.h's make_backend.
void add_backend_option(CLI::App& command, std::string& name);
// --comm and --comm-timeout: which communicator moves the backend's tensors, and how long any
// rank may wait for its peers (comm/world.h).
void add_comm_options(CLI::App& command, CommSettings& comm);
// Range checks on a numeric option, run on its text when the command line is parsed: NaN, an
// infinity or a number out of range is a tripod::Error naming the option and the value (exit 1),
// instead of CLI11's "Value 0 not in range 0.000000 to 1.79769e+308" or a silent default.
CLI::Option* require_positive(CLI::Option* option);      // finite, > 0
CLI::Option* require_non_negative(CLI::Option* option);  // finite, >= 0

// An option naming a results file to write (--json FILE, ...): checked when the command line is
// parsed (core/output_file.h's check_output_path), before any work, so a bad path fails at once.
CLI::Option* add_output_option(CLI::App& command, const std::string& names, std::string& path,
                               const std::string& description);

// Pieces of `tripod bench`, each in its own file, registered on the "bench" subcommand.
void add_bench_train_command(CLI::App& bench);       // bench_command.cpp
void add_bench_micro_commands(CLI::App& bench);      // bench_micro_command.cpp: gemm, kernels
void add_bench_overlap_command(CLI::App& bench);     // bench_overlap_command.cpp: DP comm/compute overlap
void add_bench_comm_command(CLI::App& bench);        // bench_comm_command.cpp: nccl-tests-style collectives
void add_bench_layouts_command(CLI::App& bench);     // bench_layouts_command.cpp: end-to-end MFU per layout
void add_bench_pipeline_command(CLI::App& bench);    // bench_pipeline_command.cpp: measured vs theoretical bubble
void add_bench_gemm_rate_command(CLI::App& bench);   // bench_gemm_rate_command.cpp: GEMM TFLOP/s, % of peak
void add_bench_health_command(CLI::App& bench);      // bench_health_command.cpp: NVML readings of every GPU
void add_bench_kernel_rate_command(CLI::App& bench); // bench_kernel_rate_command.cpp: kernels in GB/s, % of a copy
void add_bench_ckpt_command(CLI::App& bench);        // bench_ckpt_command.cpp: checkpoint write rate and async-save stall
void add_bench_suite(CLI::App& bench);               // bench_suite_command.cpp: `tripod bench` runs them all

}  // namespace tripod::cli
