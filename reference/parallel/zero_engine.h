// Data-parallel state and communication for ZeRO stages 0-3 (Rajbhandari et al. 2020), as the
// model sees it through ParamAccess:
//
//   stage | parameters        | gradients                              | AdamW m, v | after the step
//   0     | full              | full; buckets all-reduced in backward  | full       | (all ranks equal)
//   1     | full              | full; buckets reduce-scattered         | shard      | all-gather params
//   2     | full              | bucket-sized while in flight, shard    | shard      | all-gather params
//   3     | shard; a bucket   | as stage 2                             | shard      | (stays sharded)
//         | (one or more      |                                        |            |
//         | layers) gathered  |                                        |            |
//         | on use, then freed|                                        |            |
//
// Buckets (ShardLayout) are launched asynchronously as soon as backward reports their groups
// ready, so communication overlaps the rest of backward. Open MPI progresses non-blocking
// collectives only inside MPI calls, so every hook also test()s the requests in flight.
// Stages 0 and 1 reduce once per optimizer step (after the last micro-batch, on the accumulated
// gradients); stages 2 and 3 reduce every micro-batch and accumulate into the gradient shard.
#pragma once
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/param_access.h"
#include "optim/adamw.h"
#include "parallel/shard_layout.h"
#include "parallel/tp_shard.h"

namespace tripod {

struct ZeroMemory {  // bytes held by this rank
  std::size_t params = 0, grads = 0, optimizer = 0;  // persistent
  std::size_t peak_transient = 0;                    // gathered parameters and in-flight gradient buckets
};

// Tensor parallelism around the engine: the specs it is given are this TP rank's shards; these
// say how they map to the logical tensors (initialisation, gathering) and which are replicated
// across the TP group (counted once in the gradient norm).
struct TensorParallelShards {
  Communicator* comm = nullptr;
  std::vector<ParamSpec> logical;  // the unsplit specs, same order
  std::vector<tp::TpShard> shards;
};

class ZeroEngine final : public ParamAccess {
 public:
  // deferred_groups: see reduce_deferred; each gets a bucket of its own, so nothing else waits
  // with it, of at least deferred_bucket_min_elements (ShardLayout's own_bucket_min_elements).
  ZeroEngine(const std::vector<ParamSpec>& specs, int64_t n_layer, int stage, int64_t bucket_bytes,
             Communicator& dp, Backend& backend, DType dtype, AdamWConfig adamw,
             const TensorParallelShards* tp = nullptr, const std::vector<int>& deferred_groups = {},
             int64_t deferred_bucket_min_elements = 0);
  ~ZeroEngine() override;

  int stage() const { return stage_; }
  const ShardLayout& layout() const { return layout_; }
  ZeroMemory memory() const;

  void initialise(uint64_t seed);  // each rank initialises only what it holds
  void zero_grads();
  // Before each micro-batch's backward; reductions are launched only when `reduce` is true.
  void begin_backward(bool reduce);
  void finish_backward();  // waits for every reduction of this backward
  // Sum of squares of the reduced gradients over this engine's tensors, summed over DP (and TP):
  // an fp64 [1] tensor on the backend's device (collective). Tensors named in `excluded` are left
  // out (a pipeline's second copy of a tied embedding).
  Tensor grad_sum_squares(const std::set<std::string>& excluded = {});
  // The tensors whose gradient pieces on this rank hold an infinite or NaN value (for the error
  // that stops a diverged step; local, no communication).
  std::vector<std::string> nonfinite_grads();
  // Pipeline parallelism with tied embeddings: the buckets of the deferred groups (given at
  // construction) are not reduced during backward; the caller first sums the tied copies'
  // gradients across stages (through grad()), then reduce_deferred() launches and waits for them.
  void reduce_deferred();
  // Sequence parallelism: sums over the TP group the gradients each TP rank holds only partially
  // (tp_grad_needs_allreduce), after the DP reduction - the layouts are equal on every TP rank.
  void all_reduce_partial_tp_grads();
  void optimizer_step(double lr, int64_t step, double grad_scale);
  // Fault injection (conformance self-test): use this bucket's gradients without reducing them.
  void skip_reduction_of_bucket(int bucket) { skip_bucket_ = bucket; }
  // Every parameter, full (logical) and unpadded, identical on all ranks (a collective for stage 3
  // and under tensor parallelism).
  std::vector<std::vector<double>> gather_params();

  // ParamAccess
  const Tensor& param(const std::string& name) override;
  const Tensor& grad(const std::string& name) override;
  void acquire_params(int group) override;
  void release_params(int group) override;
  void acquire_grads(int group) override;
  void grads_ready(int group) override;

 private:
  struct Pending;
  Tensor bucket_view(const Tensor& flat, int bucket) const;
  Tensor view_in_bucket(const Tensor& bucket_buffer, int bucket, std::size_t tensor) const;
  void launch_reduction(int bucket);
  void progress();
  void complete(Pending& pending);
  const Tensor& transient_view(const std::string& key, const std::string& name, const char* what) const;
  void track_transient(std::ptrdiff_t delta);

  std::vector<ParamSpec> specs_;
  std::vector<int> groups_;
  std::vector<std::vector<std::size_t>> bucket_tensors_;  // tensor indices per bucket
  int stage_;
  Communicator& dp_;
  Backend& backend_;
  DType dtype_;
  AdamWConfig adamw_;
  ShardLayout layout_;
  std::vector<ShardLayout::Segment> segments_;  // this DP rank's pieces of its slices (fixed)

  std::unique_ptr<ParamSet> full_params_, full_grads_;  // stages 0-2 / 0-1, padded layout
  Tensor param_shard_, grad_shard_, m_, v_;              // shard-sized (m, v full-sized at stage 0)
  std::vector<Tensor> gathered_params_, bucket_grads_;   // stage 3 / stages 2-3, per bucket
  std::vector<int> param_users_;                          // acquire counts per bucket (stage 3)
  std::vector<int> groups_ready_;                         // per bucket, this backward
  std::vector<bool> deferred_;                            // per bucket: reduced by reduce_deferred
  std::map<std::string, Tensor> tensor_views_;            // views into transient buffers
  std::vector<std::unique_ptr<Pending>> pending_;
  bool reduce_ = false;
  std::unique_ptr<TensorParallelShards> tp_;
  std::vector<double> local_initial(std::size_t tensor, uint64_t seed) const;
  Tensor grad_piece(const ShardLayout::Segment& seg) const;  // this rank's reduced gradient of a segment
  int skip_bucket_ = -1;
  std::size_t transient_bytes_ = 0, peak_transient_bytes_ = 0;
};

}  // namespace tripod
