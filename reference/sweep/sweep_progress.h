// What a sweep prints while its runs train: every `progress_every` seconds one line per running run
// (step of steps, the latest loss, tokens/s, the run's ETA) and one for the sweep (runs done, its
// ETA from the work left and the rate the running children achieve together). Each line names its
// run, so several runs at once stay readable; the same lines go to OUT/sweep.log.
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

namespace tripod::sweep {

// The newest step record of a run's metrics.jsonl (read from the file's end; a torn last line, as
// a child being killed leaves, is skipped). step < 0: nothing recorded yet.
struct RunProgress {
  int64_t step = -1;  // 0-based, as the metrics count
  double loss = NAN, tokens_per_second = 0;
};
RunProgress latest_progress(const std::filesystem::path& metrics_jsonl);

// "r-1e12-n38k    step   420/1500  28%  loss 3.912   5.1k tok/s  ETA 2:10"
std::string run_progress_line(const std::string& name, const RunProgress& p, int64_t steps, int64_t tokens_per_step);

// Seconds left for `flops_left` at `flops_per_second` (negative: unknown).
double eta_seconds(double flops_left, double flops_per_second);
std::string duration_text(double seconds);  // "2:10", "1:02:03"; "?" when negative

}  // namespace tripod::sweep
