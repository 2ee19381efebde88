// tripod scale run SPEC [--out DIR] [--jobs N] [--backend B] [--dry-run]   expand and train a sweep
// tripod scale fit OUT [--bootstrap N] [--small-grid]        fit it with scaling/fit.py
// tripod scale advise FIT --threshold T [--from approach3|frontier]   when to stop scaling
// Options -> sweep/sweep_job.h. The spec schema and the conventions are in scaling/README.md.
#include "cli/commands.h"
#include "sweep/sweep_job.h"

namespace tripod::cli {
namespace {

void add_run(CLI::App& scale) {
  auto opts = std::make_shared<sweep::SweepRunOptions>();
  auto* cmd = scale.add_subcommand("run", "expand a sweep spec into runs and train them (resumable)");
  cmd->add_option("spec", opts->spec, "sweep spec: a JSON file or a preset in scaling/specs/ (quick, full)")->required();
  cmd->add_option("--out", opts->out, "sweep directory (default: runs/scale-<spec name>)");
  cmd->add_option("--jobs", opts->jobs, "runs trained at once (default: one per core)");
  cmd->add_flag("--dry-run", opts->dry_run, "print the grid (name, N, D, C, steps, tokens/param) and stop");
  add_backend_option(*cmd, opts->backend);  // passed to each run (--jobs defaults to 1 on a device)
  require_non_negative(cmd->add_option("--progress-every", opts->progress_every,
                  "seconds between progress lines (step, loss, tokens/s, ETA of each running run and of the sweep;"
                  " also in OUT/sweep.log); 0: none")
                           ->capture_default_str());
  cmd->callback([opts] { sweep::run_sweep_job(*opts); });
}

void add_fit(CLI::App& scale) {
  auto opts = std::make_shared<sweep::SweepFitOptions>();
  auto* cmd = scale.add_subcommand("fit", "fit a finished sweep (scaling/fit.py): fit.json, fit.md, plots/");
  cmd->add_option("out", opts->out, "the sweep directory of `tripod scale run`")->required();
  require_non_negative(
      cmd->add_option("--bootstrap", opts->bootstrap, "bootstrap resamples for the CIs (0: none)")->capture_default_str());
  cmd->add_flag("--small-grid", opts->small_grid, "screen 72 Approach-3 starts instead of 5400 (quick checks)");
  cmd->add_option("--python", opts->python, "Python with numpy, scipy and matplotlib")->capture_default_str();
  cmd->callback([opts] { sweep::fit_sweep(*opts); });
}

void add_advise(CLI::App& scale) {
  auto opts = std::make_shared<sweep::SweepAdviseOptions>();
  auto* cmd = scale.add_subcommand("advise", "when to stop scaling: loss gained per doubling of compute, from a fit");
  cmd->add_option("fit", opts->fit, "fit.json, a sweep directory (its fit.json), or a published law: chinchilla, epoch")
      ->required();
  cmd->add_option("--threshold", opts->threshold, "a loss gain per doubling worth paying for, e.g. 0.01")->required();
  cmd->add_option("--from", opts->source, "approach3 (the parametric law) or frontier (L_inf + k C^-gamma)")
      ->check(CLI::IsMember({"approach3", "frontier"}))
      ->capture_default_str();
  cmd->add_option("--budgets", opts->budgets, "compute budgets shown, LO:HI in FLOPs")->capture_default_str();
  cmd->add_option("--json", opts->json_out, "also write the advice as JSON here");
  cmd->add_option("--python", opts->python, "Python with numpy")->capture_default_str();
  cmd->callback([opts] { sweep::advise_sweep(*opts); });
}

}  // namespace

void add_scale_commands(CLI::App& app) {
  auto* scale = app.add_subcommand("scale", "scaling-law sweeps: run a spec, fit the results");
  scale->require_subcommand(1);
  add_run(*scale);
  add_fit(*scale);
  add_advise(*scale);
}

}  // namespace tripod::cli
