// One finished run as a sweep record (a line of OUT/runs.jsonl, also kept as
// OUT/runs/<name>/result.json): N, D, C, the losses read back from the run's metrics JSONL, the
// status and the hash of the configuration it ran.
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "sweep/sweep_grid.h"

namespace tripod::sweep {

// The losses of a run, from its train.metrics JSONL. A resumed run appends to the file, so a step
// may appear twice (the steps after the last checkpoint were redone): the last record of a step wins.
struct MetricsSummary {
  int64_t steps_recorded = 0;  // distinct steps
  int64_t last_step = -1;
  double final_loss = NAN;     // training loss of the last step (one batch: noisy)
  double smoothed_loss = NAN;  // mean training loss over the last 10% of steps
  double eval_loss = NAN;      // held-out loss of the final weights (NaN: no val split)
  double train_seconds = 0;    // sum of step times (excludes start-up, eval and checkpoints)
  // The training curve for Chinchilla's Approach 1: at up to kCurvePoints log-spaced steps, the
  // tokens seen so far and the training loss averaged over the trailing 5% of the steps so far.
  std::vector<double> curve_tokens, curve_loss;
};
constexpr int kCurvePoints = 64;

MetricsSummary summarize_metrics(const std::filesystem::path& metrics_jsonl);

enum class RunStatus { Ok, Diverged, Failed };
std::string run_status_name(RunStatus s);  // "ok" | "diverged" | "failed"

// XXH64 of the configuration's canonical dump (keys sorted), as 16 hex digits.
std::string config_hash(const nlohmann::json& config);

// The last "tripod: error: ..." line of a run's log ("" if none): why a child failed.
std::string last_error_line(const std::filesystem::path& log);

struct RunOutcome {
  RunStatus status = RunStatus::Failed;
  std::string error;           // "" when ok
  MetricsSummary metrics;
  double wall_seconds = 0;     // this launch of the child (a resumed run counts its last launch)
};

// The JSONL record. `loss` is the held-out eval loss (smoothed training loss when the corpus has
// no val split; `loss_source` says which); diverged and failed runs have loss null.
nlohmann::json make_record(const SweepSpec& spec, const PlannedRun& run, const RunOutcome& outcome);

// The record's fields that count the run's size and compute under the spec's conventions (N, D, C,
// FLOPs per token, the conventions' names, ...). A change of conventions leaves a run's training as it
// was (its config hash too), so a finished record is brought up to date with these instead of being
// kept with the old counts (N of `total` under a spec that now said `non_embedding`).
nlohmann::json counting_fields(const SweepSpec& spec, const PlannedRun& run);

}  // namespace tripod::sweep
