// Failures on purpose, for the tests of checkpoints and restarts, chosen by the environment
// variable TRIPOD_FAULT (unset: nothing happens):
//
//   kill:R:S           world rank R kills itself (SIGKILL, as a crashed node) as it starts step S
//   segv:R:S           ... raises SIGSEGV instead (a crash in Tripod's code: the crash report's stack)
//   bad-alloc:R:S      ... throws std::bad_alloc instead (an allocation that fails on one node: an
//                      exception that is not a tripod::Error, which once hung the job, comm/rank_errors.h)
//   kill-in-save:R:S   rank R kills itself during the save after step S, once its shard is written
//                      and before the manifest is (the save is left unfinished)
//   inf-update:R:S     rank R's update at step S leaves its first saved parameter element
//                      infinite (once), while the step's loss and gradients are finite: an overflow
//                      the anomaly guard cannot see (train/diverged_state.h)
//   nan-loss:S         every rank's anomaly guard (train/step_guard.h) sees step S's loss as NaN
//   spike-loss:S       ... as 10 times what it is
//   slow-snapshot:MS   a background save's copy of the state starts MS milliseconds late (every
//                      save), so a step's update that did not wait for it would show in the files
//
// S counts steps from 1, as the log does. A run that resumed from a checkpoint never injects, so
// the restart a supervisor makes gets past the fault. A malformed value is an error at start-up,
// and so is a fault this run can never reach (a rank it does not have, a step past its end, a
// save it does not make): a test of a restart that injected nothing would pass for the wrong reason.
#pragma once
#include <cstdint>
#include <functional>

namespace tripod {

enum class FaultPoint { StepStart, DuringSave, Loss, Snapshot, Update };

// What a run will do, for the check that its fault can fire.
struct FaultReach {
  int world_size = 1;
  int64_t last_step = 0;                          // train.steps
  std::function<bool(int64_t)> saves_after;       // a checkpoint is written after step S
  bool background_saves = false;                  // some save runs in the background (slow-snapshot)
};

// Parses TRIPOD_FAULT (throws naming it when malformed or out of the run's reach); call once at
// start-up.
void arm_fault_injection(bool resumed, const FaultReach& reach);
// Kills this process when the armed fault names this point, rank and step.
void maybe_inject_fault(FaultPoint point, int world_rank, int64_t step);
// The loss the anomaly guard is to see for step `step`: `loss`, unless a loss fault names the step.
double maybe_inject_loss_fault(int64_t step, double loss);
// Whether this rank's update at step `step` is to leave a parameter infinite (inf-update), once.
bool maybe_inject_update_fault(int world_rank, int64_t step);
// Sleeps as slow-snapshot asks (called by a background save before it copies the state).
void maybe_delay_snapshot();

}  // namespace tripod
