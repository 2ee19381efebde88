// What `tripod launch` reads in one attempt's output (process/supervisor.h has the definitions
// its reports use): the progress lines "step N/TOTAL | ...", the last "tripod: error:" line, and
// when the output showed each step, to tell how much wall time a failure threw away.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "process/watched_child.h"

namespace tripod::process {

// The N of a progress line "step N/TOTAL ..." (after an optional launcher prefix ending in ':' or
// '>', such as Open MPI's "[1,0]<stdout>:" or srun's "0: "), else nullopt.
std::optional<int64_t> progress_step(std::string_view line);
// The step a trainer's divergence names: the last "step N" before "(training diverged)" in
// "tripod: error: rank 1 of 2: step 5: the loss is nan (training diverged); ..." or in a rank's line
// of a refused save, "  rank 0: rank 0's tensor ... after step 3's update (training diverged): ...";
// nullopt where the line says no divergence.
std::optional<int64_t> divergence_step(std::string_view error_line);
// The step of ROOT/latest ("step-00000010" -> 10); 0 when the file is absent; nullopt when it does
// not name a step directory.
std::optional<int64_t> latest_checkpoint_step(const std::filesystem::path& root);

class ProgressWatch {
 public:
  using Clock = WatchedChild::Clock;

  // `checkpoints`: the root whose latest checkpoint the loss is measured from (empty: unknown; then
  // only the last step and error are kept); `resume_step` says which step that is (as
  // SupervisorOptions::resume_step; empty: latest_checkpoint_step).
  using ResumeStep = std::function<std::optional<int64_t>(const std::filesystem::path&)>;
  explicit ProgressWatch(std::filesystem::path checkpoints, ResumeStep resume_step = {})
      : checkpoints_(std::move(checkpoints)),
        resume_step_(resume_step ? std::move(resume_step) : ResumeStep(latest_checkpoint_step)) {}

  void on_line(OutputStream stream, std::string_view line);
  std::optional<int64_t> last_step() const { return last_step_; }
  // The step a restart resumes from now (see the constructor).
  std::optional<int64_t> resume_step() const { return resume_step_(checkpoints_); }
  const std::string& error_line() const { return error_line_; }
  // The step of the last divergence the output named (divergence_step), if any. Not read from the
  // error line alone: a save refused on several ranks says why on the lines after it.
  std::optional<int64_t> diverged_at() const { return diverged_at_; }
  // When the output showed the job at checkpoint step `c`: the line for step c, or the first
  // line past it when an earlier line was before it (train.log_every may skip c); nullopt when
  // the attempt never showed c (it failed before reaching it, or started past it).
  std::optional<Clock::time_point> reached(int64_t c) const;

 private:
  std::filesystem::path checkpoints_;
  ResumeStep resume_step_;
  std::optional<int64_t> last_step_;
  std::string error_line_;
  std::optional<int64_t> diverged_at_;
  // (step, when its line came), kept from the latest checkpoint known on: the checkpoint only
  // moves forward, so an older step can never be the one asked for.
  std::deque<std::pair<int64_t, Clock::time_point>> seen_;
  bool forgot_earlier_ = false;  // lines of steps before seen_'s first were seen
  Clock::time_point checkpoint_read_{};
};

}  // namespace tripod::process
