// Conformance of parallel layouts: run K training steps of one layout and of the single-device
// reference from the same initialisation on the same global batches, in the same precision, and
// compare losses, gradient norms and every final parameter (gathered to its logical shape).
//
// Tolerances (per comparison; DP and ZeRO only reorder sums of the same products):
// Pipelining changes no arithmetic inside a micro-batch; it only splits the gradient-norm sum by
// stage and, with tied embeddings, adds the LM head's and the embedding's wte gradients as two
// sums instead of one interleaved sum - reorderings again.
//   fp64: 1e-10 relative for losses, norms and each parameter tensor (relative to its largest
//         element) - a reduction-order change moves results by ~1e-16, a bug by far more.
//   fp32: losses and norms 1e-5 relative. Parameters 1e-5 relative plus lr*K*1e-3 plus twice the
//         tensor's rounding floor. AdamW divides by sqrt(v)+eps, so an element whose gradient is
//         near eps (1e-8) - an exactly vanishing gradient such as the key bias's, or a sum that
//         cancels, as for an untied embedding row whose token only feeds a few attention scores -
//         turns the gradient's relative rounding error d into an update error of up to lr*d/4 per
//         step, and in fp32 d can be O(1) there. No fixed bound covers that, so it is measured: the
//         rounding floor of a tensor is the largest |fp32 - fp64| element of the single-device
//         reference run in both precisions, i.e. how far rounding alone moved it. A layout is as
//         exact as the reference, so |layout - reference| <= |layout - exact| + |reference - exact|
//         is about twice the floor. lr*K*1e-3 still covers the vanishing-gradient elements where
//         both precisions happen to agree. Observed floors (conformance model, K = 5): 1.6e-4 for
//         the untied wte, <= 1e-5 elsewhere - against one step of a real bug, ~lr = 1e-2.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/batch_loader.h"
#include "parallel/process_grid.h"
#include "parallel/fault_plan.h"
#include "parallel/parallel_layout.h"
#include "train/distributed_trainer.h"
#include "train/run_config.h"

namespace tripod::conform {

struct Trajectory {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> params;  // per tensor, logical order and shape
  double seconds_per_step = 0;
  // This rank's memory: the backend allocator's peak during the run, and what the trainer's
  // accounting says it holds (parameters, gradients, optimizer state, activations, transients).
  // accounted_bytes: the trainer's memory report; transient_bytes its part that depends on timing
  // (the peak of gathered parameters, buckets and pipeline messages in flight at once).
  std::size_t peak_bytes = 0, accounted_bytes = 0, transient_bytes = 0;
};

struct Errors {
  double loss_abs = 0, loss_rel = 0, norm_abs = 0, norm_rel = 0, param_abs = 0, param_rel = 0;
  std::string worst_param;  // tensor with the largest relative error
  double error_over_bound = 0;  // the largest error / its bound over all checks: <= 1 passes
  bool pass = true;
  std::string failure;      // first violated bound, for reports
};

// The conformance model: small, but with every path exercised - a vocabulary of 97, which no TP
// size divides (the vocab-parallel padding is live), a tied LM head (tripod conform also runs it
// untied), ignored targets, active clipping and weight decay.
RunConfig default_conformance_config(const std::string& dtype);
// Global batch of step s: random tokens with about one target in eight ignored.
data::Batch conformance_batch(const RunConfig& config, int step);

// Steps first..last-1 of the conformance batches on `engine`, appended to `t`'s losses and norms;
// returns their summed time.
double run_conformance_steps(TrainingEngine& engine, const RunConfig& config, int first, int last, Trajectory& t);

// Every run computes on `backend` (its tensors on the backend's device; the group must accept them).
Trajectory run_single_device(const RunConfig& config, int steps, Backend& backend);
// `group` holds exactly layout.ranks() ranks. Deliberate bugs (parallel/fault_plan.h) prove the
// suite can fail. Conform runs use 4 KiB gradient buckets, so the small model has several.
Trajectory run_layout(const RunConfig& config, const ParallelLayout& layout, Communicator& group, int steps,
                      Backend& backend, const FaultPlan& faults = FaultPlan());
// The step shape conform's layouts must divide.
StepShape conformance_step(const RunConfig& config);
// How far rounding alone moves the single-device reference from its fp64 run: per parameter
// tensor the largest |low - fp64| element, and per step the largest |low - fp64| of the loss and
// of the gradient norm up to that step. A layout reorders sums, so it may land anywhere within
// twice that of the reference (fp32: the parameters only; bf16-mixed: the losses and norms too,
// below). Why up to that step: once rounding has separated two trajectories they do not come
// together again, but their losses can cross, and at the crossing step the distance says nothing
// of the separation (bf16-mixed conformance model, 10 steps: 1.7e-4 relative at step 4, 4e-6 at
// step 6, 3.6e-5 at step 7; a GPU run 2e-5 away failed there).
struct RoundingFloor {
  std::vector<double> params, losses, norms;
  bool empty() const { return params.empty(); }
};
RoundingFloor rounding_floor(const Trajectory& low_precision, const Trajectory& fp64);
// |a - b|, and infinitely far where either is NaN: std::max keeps its first argument against a
// NaN, so a NaN parameter element once vanished from the largest difference and its layout passed.
double distance(double a, double b);
// `floor` is empty for fp64, where none is needed.
Errors compare(const Trajectory& got, const Trajectory& reference, const RunConfig& config,
               const RoundingFloor& floor = {});
bool bit_identical(const Trajectory& a, const Trajectory& b);
// A 64-bit hash (xxHash, hex) of every loss, norm and parameter bit: equal fingerprints mean
// bit-identical trajectories, across layouts, backends or machines.
std::string fingerprint(const Trajectory& t);
std::string first_difference(const Trajectory& a, const Trajectory& b);

}  // namespace tripod::conform
