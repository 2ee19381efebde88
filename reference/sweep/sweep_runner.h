// Running a sweep: each planned run is a `tripod train` child process, at most `jobs` at once.
//
// OUT/
//   sweep.json              the spec, the corpus and the grid (what `tripod scale fit` reads back)
//   corpus/                 the synthetic corpus, when the spec asks for one
//   runs.jsonl              one record per finished run (appended as runs finish, rewritten in grid
//                           order at the end so a redone run appears once)
//   sweep.log               what the driver printed: starts, progress lines, results
//   runs/<name>/config.json the run's complete `tripod train --config` file
//   runs/<name>/train.log   the child's stdout and stderr, appended across launches
//   runs/<name>/metrics.jsonl, ckpt/   per-step metrics; the latest checkpoint
//   runs/<name>/result.json the run's record: present = finished (ok and diverged runs are final,
//                           failed ones are retried by the next `scale run`)
//
// A rerun skips finished runs and resumes interrupted ones from their checkpoint. A run directory
// holding results of a different configuration (the spec changed) is an error, never overwritten.
#pragma once
#include <filesystem>
#include <vector>

#include "sweep/sweep_grid.h"
#include "sweep/sweep_spec.h"

namespace tripod::sweep {

struct RunPaths {
  std::filesystem::path dir, config, log, metrics, ckpt, result;
};
RunPaths run_paths(const std::filesystem::path& out_dir, const std::string& run_name);

struct SweepOptions {
  std::filesystem::path out_dir;
  int jobs = 0;  // 0: one per core
  double progress_every = 15;  // seconds between progress reports (sweep/sweep_progress.h); 0: none
  std::string backend = "cpu";  // each run's `tripod train --backend`; a device's sweep runs one at a time by default
};

struct SweepOutcome {
  int runs = 0, already_finished = 0, ok = 0, diverged = 0, failed = 0;
  double seconds = 0;
};

// Sets each run's train.metrics to its run directory (so configs and hashes are final).
void place_runs(std::vector<PlannedRun>& grid, const std::filesystem::path& out_dir);

// Trains every unfinished run; throws tripod::Error when runs failed or the driver was interrupted
// (after stopping its children, so that a rerun resumes them).
SweepOutcome run_sweep(const SweepSpec& spec, const CorpusInfo& corpus, const std::vector<PlannedRun>& grid,
                       const SweepOptions& options);

}  // namespace tripod::sweep
