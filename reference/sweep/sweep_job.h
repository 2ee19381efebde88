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
};
void run_sweep_job(const SweepRunOptions& options);

struct SweepFitOptions {
  std::string out, python = "/usr/bin/python3";
  int bootstrap = 200;
  bool small_grid = false;
};
void fit_sweep(const SweepFitOptions& options);

}  // namespace tripod::sweep
