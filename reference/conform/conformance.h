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
#include "train/distributed_trainer.h"
#include "train/run_config.h"

namespace tripod::conform {

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int zero = 0;
  int micro_batches = 1;
  std::string schedule = "none";  // pipeline schedule with pp > 1: afab, 1f1b, interleaved
  int virtual_stages = 1;         // model chunks per pipeline rank (interleaved)
  bool sequence_parallel = false;
  std::string name() const;       // "tp1-pp1-dp2-z1-mb2", "tp2-pp2-dp2-z1-mb4-interleaved-v2"
  int ranks() const { return tp * pp * dp; }
};
Layout parse_layout(const std::string& name);  // inverse of name(); throws naming the bad part
// Every layout the implemented parallelism supports on `world_size` ranks for this model and batch.
std::vector<Layout> enumerate_layouts(int world_size, const RunConfig& config);

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
// Deliberate bugs that prove the suite can fail.
enum class Fault {
  None,
  SkipGradReduction,          // bucket 0's DP reduction is skipped (its gradients used unreduced)
  SkipTiedEmbeddingReduction  // a pipeline's two wte copies are not summed across stages
};
Fault parse_fault(const std::string& name);  // "", "skip-grad-reduction", "skip-tied-embedding-reduction"

// The trainer settings of a layout on a grid of its shape (bucket size, schedule, fault).
DataParallelSettings layout_settings(const Layout& layout, const ProcessGrid& grid, int64_t bucket_bytes,
                                     Fault fault = Fault::None);

// `group` holds exactly layout.ranks() ranks.
Trajectory run_layout(const RunConfig& config, const Layout& layout, Communicator& group, int steps, Backend& backend,
                      Fault fault = Fault::None);
Errors compare(const Trajectory& got, const Trajectory& reference, const RunConfig& config);
bool bit_identical(const Trajectory& a, const Trajectory& b);
// A 64-bit hash (xxHash, hex) of every loss, norm and parameter bit: equal fingerprints mean
// bit-identical trajectories, across layouts, backends or machines.
std::string fingerprint(const Trajectory& t);
std::string first_difference(const Trajectory& a, const Trajectory& b);

}  // namespace tripod::conform
