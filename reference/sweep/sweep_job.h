// The `tripod scale` jobs: expand a sweep spec into runs and train them (resumable), and fit a
// finished sweep with the Python fitter (scaling/fit.py), checking the fitted irreducible loss
// against the corpus's entropy rate where it is known.
#pragma once
#include <string>

namespace tripod::sweep {

struct SweepRunOptions {
  std::string spec, out;  // out: default runs/scale-<spec name>
  int jobs = 0;           // runs at once; 0: one per core
  bool dry_run = false;   // print the grid and stop
  double progress_every = 15;  // seconds between progress lines (0: none)
  std::string backend = "cpu";  // each run's `tripod train --backend`
};
void run_sweep_job(const SweepRunOptions& options);

struct SweepFitOptions {
  std::string out, python = "/usr/bin/python3";
  int bootstrap = 200;
  bool small_grid = false;
};
void fit_sweep(const SweepFitOptions& options);

// "When to stop scaling" (scaling/advise.py): the loss a doubling of compute buys along a fitted
// law's compute-optimal frontier, and the budget where it falls below a threshold, with intervals.
struct SweepAdviseOptions {
  std::string fit;  // fit.json, a sweep directory, or a published law: chinchilla, epoch
  double threshold = 0;
  std::string source = "approach3", budgets = "1e15:1e27", json_out, python = "/usr/bin/python3";
};
void advise_sweep(const SweepAdviseOptions& options);

}  // namespace tripod::sweep
