// tripod conform: every parallel layout of the launched ranks (or those named with --layouts)
// against the single-device reference (conform/suite.h).
//   mpirun -np 8 tripod conform --dtype fp64 --json conform.json --junit conform.xml
#include <filesystem>

#include "cli/commands.h"
#include "conform/suite.h"

namespace tripod::cli {

void add_conform_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("conform", "check every parallel layout against the single-device reference");
  auto o = std::make_shared<conform::SuiteOptions>();
  cmd->add_option("--dtype", o->dtype, "fp64 (bugs vs rounding), fp32 or bf16-mixed (fp32 with bf16 GEMM operands)")->capture_default_str();
  cmd->add_option("--steps", o->steps, "training steps per layout")->capture_default_str();
  cmd->add_option("--layouts", o->layouts, "layouts to run, e.g. tp1-pp1-dp2-z1-mb2 (default: all valid)");
  cmd->add_option("-c,--config", o->config, "model config (default: the built-in conformance model)");
  cmd->add_option("--set", o->overrides, "override a config key (repeatable)");
  add_output_option(*cmd, "--json", o->json_out, "write one JSON record per layout here");
  add_output_option(*cmd, "--junit", o->junit_out, "write JUnit XML here");
  add_backend_option(*cmd, o->backend);
  add_comm_options(*cmd, o->comm);
  cmd->add_option("--heads", o->heads, "LM heads: alternate (the head flips as TP x DP x micro-batches doubles, so every ZeRO stage and schedule meets both and bit twins share one), tied or untied")
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_seconds, "seconds a layout may take before the job is ended as hung (a rank whose row fails while the "
                  "others still wait for it in the layout ends the job sooner, after 10 s or three times the row's "
                  "time)")
      ->capture_default_str();
  cmd->add_option("--inject-fault", o->faults, "plant a deliberate bug (repeatable; see --list-faults)");
  cmd->add_flag("--reshard", o->reshard, "also run each layout halfway, save a sharded checkpoint and finish in the "
               "next layout of the list from it (the last into the first)");
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir, "--reshard's checkpoints go here and stay (default: a "
                  "temporary folder, removed; across nodes give a shared one)");
  cmd->add_flag("--list-faults", o->list_faults, "print the catalogue of injectable faults and exit");
  cmd->add_option("--list-layouts", o->list_layouts_world, "print the layouts a run on N ranks checks (with --dtype, "
                  "--heads, --layouts, --config and --set as given), each with its LM head, and exit; needs no MPI")
      ->type_name("N")
      ->check(CLI::Range(1, 4096));
  cmd->callback([o]() {
    // One file for both: the XML replaced the JSON, and the run exited 0.
    namespace fs = std::filesystem;
    TRIPOD_CHECK(o->json_out.empty() || o->junit_out.empty() ||
                     fs::weakly_canonical(fs::absolute(o->json_out)) != fs::weakly_canonical(fs::absolute(o->junit_out)),
                 "--json and --junit name the same file (", o->json_out, "): give each its own");
    conform::run_suite(*o);
  });
}

}  // namespace tripod::cli
