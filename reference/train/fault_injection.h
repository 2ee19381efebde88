// Failures on purpose, for the tests of checkpoints and restarts, chosen by the environment
// variable TRIPOD_FAULT (unset: nothing happens):
//
//   kill:R:S           world rank R kills itself (SIGKILL, as a crashed node) as it starts step S
//   kill-in-save:R:S   rank R kills itself during the save after step S, once its shard is written
//                      and before the manifest is (the save is left unfinished)
//   nan-loss:S         every rank's anomaly guard (train/step_guard.h) sees step S's loss as NaN
//   spike-loss:S       ... as 10 times what it is
//   slow-snapshot:MS   a background save's copy of the state starts MS milliseconds late (every
//                      save), so a step's update that did not wait for it would show in the files
//
// S counts steps from 1, as the log does. A run that resumed from a checkpoint never injects, so
// the restart a supervisor makes gets past the fault. A malformed value is an error at start-up.
#pragma once
#include <cstdint>

namespace tripod {

enum class FaultPoint { StepStart, DuringSave, Loss, Snapshot };

// Parses TRIPOD_FAULT (throws naming it when malformed); call once at start-up.
void arm_fault_injection(bool resumed);
// Kills this process when the armed fault names this point, rank and step.
void maybe_inject_fault(FaultPoint point, int world_rank, int64_t step);
// The loss the anomaly guard is to see for step `step`: `loss`, unless a loss fault names the step.
double maybe_inject_loss_fault(int64_t step, double loss);
// Sleeps as slow-snapshot asks (called by a background save before it copies the state).
void maybe_delay_snapshot();

}  // namespace tripod
