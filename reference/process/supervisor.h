// `tripod launch`: runs a job's launcher command line (mpirun ..., srun ...) and, when the job fails
// (a non-zero exit, a signal, or no output for longer than the progress timeout), runs the same
// command line again, up to a number of restarts. The command is expected to resume by itself
// (`tripod train --save ROOT --resume auto`); the supervisor only reads ROOT/latest to say where a
// restart resumes from and what the failure cost.
//
// Each failure is reported on stderr ("tripod launch: ...") and, for scripts, as an event (see
// LaunchEvent). Definitions used in the reports:
//   last step         the largest N of the attempt's progress lines "step N/TOTAL" (stdout; a
//                     launcher's prefix such as "[1,0]<stdout>:" or "0: " is allowed;
//                     process/progress_watch.h reads them);
//   checkpoint step   the step a restart resumes from under ROOT after the attempt (0 when there
//                     is none yet): ROOT/latest's, or SupervisorOptions::resume_step's answer;
//   steps to recompute = last step - checkpoint step (never below 0);
//   wall time lost    the attempt's time from the moment its output showed the checkpoint's step
//                     (the line for that step, or the first one past it when an earlier line was
//                     before it) to its end; the whole attempt when it never showed that step
//                     (it failed before reaching the checkpoint, or started past it). Time spent
//                     starting the next attempt is not counted.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tripod::process {

struct SupervisorOptions {
  std::vector<std::string> command;  // argv of the launcher command line; [0] is found on PATH
  int max_restarts = 3;
  // Seconds without any output after which the job is taken to be stuck (0: never). Off by default:
  // the trainer prints only every train.log_every steps, and its first line only after loading the
  // data and initialising every rank, so no one value fits both a toy run and a large model; the
  // trainer's own --comm-timeout already ends a job whose ranks hang in a collective.
  double progress_timeout_s = 0;
  // Seconds between SIGTERM and SIGKILL: the trainer answers SIGTERM by finishing its step and
  // saving a checkpoint (train_loop.cpp), which needs time on a large model.
  double kill_grace_s = 30;
  // Seconds between a failure and the restart: mpirun and srun return when their ranks have
  // exited, but the ports, GPU memory and (for Slurm) the step's resources are freed shortly after.
  double restart_delay_s = 5;
  // Checkpoint root whose `latest` file says where a restart resumes; empty: the command's own
  // `--save DIR` if it has one, else unknown (the report then leaves the cost out).
  std::filesystem::path checkpoints;
  // The step the command resumes from under a checkpoint root (0: none yet; nullopt: cannot tell).
  // Empty: the step ROOT/latest names. `tripod launch` gives the trainer's own rule (the newest
  // complete checkpoint when `latest` cannot be followed), which this layer cannot see.
  std::function<std::optional<int64_t>(const std::filesystem::path&)> resume_step;
  // Why the root's `latest` cannot be followed ("" when it can), reported as a warning with each
  // failure: the resume then silently goes elsewhere than the file a user reads says. Empty: none.
  std::function<std::string(const std::filesystem::path&)> resume_problem;
};

struct LaunchEvent {
  enum class Kind { failure, restart, finish };
  Kind kind = Kind::failure;
  int attempt = 0;  // 1-based: the attempt that failed, the one a restart starts, the last one
  // failure
  std::string cause;       // "exit", "signal", "progress_timeout", "interrupted"
  std::string what;        // "exit status 1", "killed by signal 9 (Killed)", ...
  int exit_code = 0;       // as a shell reports it: the status, or 128 + signal
  std::optional<int> signal;
  std::string error_line;  // the last "tripod: error: ..." the command printed (empty: none)
  std::optional<int64_t> last_step;
  std::optional<int64_t> checkpoint_step;    // also the step a restart resumes from
  std::optional<int64_t> steps_to_recompute;
  double attempt_seconds = 0;
  std::optional<double> lost_seconds;
  // restart
  int restart = 0, max_restarts = 0;
  double delay_seconds = 0;
  // finish
  std::string status;  // "succeeded", "failed", "interrupted", "diverged" (twice at one step: no restart)
  int attempts = 0, restarts = 0;
  double wall_seconds = 0;
  std::optional<double> total_lost_seconds;  // unknown when any failure's cost was
};

// Runs the command until it succeeds, restarts are used up, two attempts in a row diverge at the same
// step (ProgressWatch::diverged_at: a bit-exact resume diverges there on every restart), or
// SIGINT/SIGTERM/SIGHUP arrives (forwarded to the command's process group as SIGTERM, which both
// mpirun and srun pass to every rank; no restart follows). Returns the exit code for the program: 0 on success, else the last attempt's
// non-zero code (1 where that was 0, e.g. a stuck job that exited cleanly when told to stop).
int supervise(const SupervisorOptions& options, const std::function<void(const LaunchEvent&)>& on_event = {});

}  // namespace tripod::process
