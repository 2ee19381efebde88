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
//   fp32: losses and norms 1e-5 relative; parameters 1e-5 relative plus lr*K*1e-3 absolute,
//         because AdamW divides by sqrt(v)+eps: an element whose gradient is ~0 (the key bias's
//         gradient vanishes exactly in exact arithmetic) turns rounding noise into an update of up
//         to lr per step; 1e-3 of that is still 100x below one step of a real bug.
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

using Layout = ParallelLayout;  // conform's layouts are the trainer's (parallel/parallel_layout.h)

struct Trajectory {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> params;  // per tensor, logical order and shape
  double seconds_per_step = 0;
};

struct Errors {
  double loss_abs = 0, loss_rel = 0, norm_abs = 0, norm_rel = 0, param_abs = 0, param_rel = 0;
  std::string worst_param;  // tensor with the largest relative error
  bool pass = true;
  std::string failure;      // first violated bound, for reports
};

// The conformance model: small, but with every feature (tied LM head, ignored targets, clipping).
RunConfig default_conformance_config(const std::string& dtype);
// Global batch of step s: random tokens with about one target in eight ignored.
data::Batch conformance_batch(const RunConfig& config, int step);

// Every run computes on `backend` (its tensors on the backend's device; the group must accept them).
Trajectory run_single_device(const RunConfig& config, int steps, Backend& backend);
// `group` holds exactly layout.ranks() ranks. Deliberate bugs (parallel/fault_plan.h) prove the
// suite can fail. Conform runs use 4 KiB gradient buckets, so the small model has several.
Trajectory run_layout(const RunConfig& config, const Layout& layout, Communicator& group, int steps, Backend& backend,
                      const FaultPlan& faults = FaultPlan());
// The step shape conform's layouts must divide.
StepShape conformance_step(const RunConfig& config);
Errors compare(const Trajectory& got, const Trajectory& reference, const RunConfig& config);
bool bit_identical(const Trajectory& a, const Trajectory& b);
// A 64-bit hash (xxHash, hex) of every loss, norm and parameter bit: equal fingerprints mean
// bit-identical trajectories, across layouts, backends or machines.
std::string fingerprint(const Trajectory& t);
std::string first_difference(const Trajectory& a, const Trajectory& b);

}  // namespace tripod::conform
