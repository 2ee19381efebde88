// What the training loop drives: the single-device Trainer or the DistributedTrainer. Both take
// the *global* batch of a step (every rank loads the same one; a DP rank uses its slice).
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "core/state_region.h"
#include "data/batch_loader.h"
#include "train/step_guard.h"

namespace tripod {

struct StepResult {
  int64_t step = 0;       // the step just taken, counting from 0
  double loss = 0;        // mean cross-entropy over valid targets of the global batch
  double grad_norm = 0;   // global L2 norm before clipping
  double lr = 0;
  int64_t tokens = 0;     // tokens processed (B * T of the global batch)
  double seconds = 0;     // wall time of the step
  StepVerdict verdict = StepVerdict::Apply;  // Skip: no update; Rollback: no update, step not counted
  std::string anomaly;    // why the update was not applied (train/step_guard.h)
};

// Asked by the engine between the gradients and the update, with the all-reduced loss and
// gradient norm: whether the update is applied (train/step_guard.h).
using StepGate = std::function<StepJudgement(double loss, double grad_norm)>;

// What both engines do between the gradients and the update: asks `gate` about `r` (its loss and
// norm filled in), records the verdict in `r`, and on Stop fails naming the step (`step` counts
// from 0; the message from 1, as the log) and, when only the gradients are non-finite, the
// tensors `nonfinite_gradients` lists. Returns whether the update is to be applied.
bool judge_step(const StepGate& gate, int64_t step, StepResult& r,
                const std::function<std::string()>& nonfinite_gradients);

struct MemoryReport {  // bytes held by this rank
  std::size_t params = 0, grads = 0, optimizer = 0, activations = 0;
  // Peak of gathered parameters and in-flight gradient buckets (ZeRO) and pipeline messages.
  std::size_t transient = 0;
};

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;
  virtual void initialise() = 0;
  // One step. A Stop verdict is an error naming the step (from 1, as the log counts) and the
  // non-finite gradients, after which the parameters are as before the step.
  virtual StepResult train_step(const data::Batch& global_batch, const StepGate& gate) = 0;
  // The same under the default policy: stop on a non-finite loss or gradient norm.
  StepResult train_step(const data::Batch& global_batch) {
    StepGuard stop_on_divergence;
    return train_step(global_batch, [&](double loss, double norm) { return stop_on_divergence.judge(loss, norm); });
  }
  virtual double eval_loss(const data::Batch& global_batch) = 0;
  virtual int64_t step() const = 0;
  // The updates applied so far: step() less the skipped steps. AdamW's bias correction counts
  // these, as torch's and Megatron-LM's optimizers do (a step they skip never calls the optimizer),
  // while the learning-rate schedule follows step().
  virtual int64_t updates() const = 0;
  // Allocates the activations of one micro-batch now, so memory() can be reported before step 1.
  virtual void reserve_activations() = 0;
  virtual MemoryReport memory() const = 0;
  // Checkpoints (train/checkpointing.h): everything this rank holds of the parameters and AdamW
  // state, in logical coordinates, so that any layout can read what any layout wrote. Views of
  // the engine's own buffers; loading into them and set_step() resume the run exactly.
  virtual std::vector<StateRegion> state_regions() = 0;
  virtual void set_step(int64_t step, int64_t updates) = 0;
};

}  // namespace tripod
