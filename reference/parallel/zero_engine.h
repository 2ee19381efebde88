// The data-parallel owner of a model chunk's parameters, gradients and optimizer state under ZeRO
// stages 0-3, as the model sees it through ParamAccess. It composes the parts, each in its file:
//   parallel/zero_policy.h         what the stage shards and when it reduces (computed once)
//   parallel/gradient_buckets.h    bucketed reductions launched during backward
//   parallel/param_gatherer.h      ZeRO-3's gather-on-use and release
//   parallel/sharded_optimizer.h   AdamW on this rank's shard, the sum of squares for the norm
//   parallel/updated_param_gather.h ZeRO-1/2's all-gather of the updated slices after the step,
//                                   blocking or overlapped with the next forward
// Reductions over tensor-parallel groups (SP's partial gradients, the norm's TP sum) are the
// trainer's: the engine offers the reduced gradient pieces it updates. Deliberate bugs come from a
// FaultPlan (parallel/fault_plan.h), never from flags of the engine's own.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/state_region.h"
#include "model/param_access.h"
#include "optim/adamw.h"
#include "parallel/fault_plan.h"
#include "parallel/gradient_buckets.h"
#include "parallel/param_gatherer.h"
#include "parallel/shard_layout.h"
#include "parallel/sharded_optimizer.h"
#include "parallel/tp_shard.h"
#include "parallel/updated_param_gather.h"
#include "parallel/zero_policy.h"

namespace tripod {

struct ZeroMemory {  // bytes held by this rank
  std::size_t params = 0, grads = 0, optimizer = 0;  // persistent
  std::size_t peak_transient = 0;                    // gathered parameters and in-flight gradient buckets
  std::size_t peak_gathered = 0;                     // ZeRO-3: gathered parameter buckets alone
};

// Tensor parallelism around the engine: the specs it is given are this TP rank's shards; these
// say how they map to the logical tensors (initialisation, gathering full parameters).
struct TensorParallelShards {
  Communicator* comm = nullptr;
  std::vector<ParamSpec> logical;  // the unsplit specs, same order
  std::vector<tp::TpShard> shards;
};

struct ZeroSettings {
  int stage = 0;
  int64_t bucket_bytes = int64_t{4} << 20;  // gradient bucket size
  DType dtype = DType::F32;
  AdamWConfig adamw;
  // Groups whose buckets are reduced only by reduce_deferred(), each in a bucket of its own of at
  // least deferred_bucket_min_elements (ShardLayout's own_bucket_min_elements).
  std::vector<int> deferred_groups;
  int64_t deferred_bucket_min_elements = 0;
  int zero3_prefetch = 1;  // ZeRO-3: buckets gathered ahead of use (parallel/param_gatherer.h)
  // Groups whose gradient may be reduced in two parts (a tied embedding with its LM head in the
  // same span), each in a bucket of its own: the part final early in backward, then the rows the
  // rest of backward adds (grads_ready_except_rows; parallel/gradient_buckets.h).
  std::vector<int> split_groups;
  // Of those, the groups only an embedding lookup writes (an untied embedding): while nothing has
  // been accumulated in their bucket, the first part is zero and is not sent.
  std::vector<int> sparse_groups;
  // ZeRO 1-3 under the bf16-operand policy: the weights the model reads only as GEMM operands
  // travel as bf16 (half the bytes, the same bits): ZeRO-3's gathers on use
  // (parallel/param_gatherer.h), ZeRO-1/2's after the step (parallel/updated_param_gather.h).
  // Only with an fp32 dtype.
  bool bf16_operand_gathers = false;
  // ZeRO-1/2: the step's parameter all-gathers stay in flight until the next forward reaches each
  // bucket (parallel/updated_param_gather.h), as Megatron's --overlap-param-gather.
  bool overlap_param_gather = false;
};

class ZeroEngine final : public ParamAccess {
 public:
  // `tp` (optional: when the specs are TP shards, a one-rank group's padded vocabulary included) is
  // copied; so is the fault plan.
  ZeroEngine(std::vector<ParamSpec> specs, const ZeroSettings& settings, Communicator& dp, Backend& backend,
             const TensorParallelShards* tp = nullptr, const FaultPlan& faults = FaultPlan());
  ~ZeroEngine() override;

  const ZeroPolicy& policy() const { return policy_; }
  const ShardLayout& layout() const { return layout_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  ZeroMemory memory() const;

  void initialise(uint64_t seed);  // each rank initialises only what it holds
  void zero_grads();
  // Before each micro-batch's forward (ZeRO-3 prefetches along the recorded order of a pass).
  void begin_forward() {
    if (gatherer_) timed(Traffic::Gathers, [&] { gatherer_->begin_pass(PassKind::Forward); });
  }
  // Before each micro-batch's backward; reductions are launched only when `reduce` is true.
  void begin_backward(bool reduce) {
    ++backwards_since_zero_;
    buckets_->begin_backward(reduce);
    if (gatherer_) timed(Traffic::Gathers, [&] { gatherer_->begin_pass(PassKind::Backward); });
  }
  void finish_backward() {  // waits for every reduction of this backward
    timed(Traffic::Reductions, [&] { buckets_->finish(); });
  }
  // Pipeline parallelism with tied embeddings: the buckets of the deferred groups (given at
  // construction) are not reduced during backward; the caller first sums the tied copies'
  // gradients across stages (through grad()), then reduce_deferred() launches and waits for them.
  void reduce_deferred() {
    timed(Traffic::Reductions, [&] { buckets_->reduce_deferred(); });
  }
  // See ShardedOptimizer: the DP-summed sum of squares over counted tensors, and the pieces updated.
  Tensor grad_sum_squares(const std::function<bool(std::size_t tensor)>& counted) {
    return optimizer_->grad_sum_squares(counted);
  }
  std::vector<std::pair<std::size_t, Tensor>> updated_grad_pieces() const { return optimizer_->updated_grad_pieces(); }
  // The tensors whose gradient pieces on this rank hold an infinite or NaN value (local).
  std::vector<std::string> nonfinite_grads();
  // AdamW on this rank's slices, then (stages 1-2) their all-gather into the full parameters,
  // waited for here or, overlapped, bucket by bucket as the model acquires them (and wholly by
  // anything else that touches the parameters: the next step, gather_params, state_regions,
  // initialise).
  void optimizer_step(double lr, int64_t step, double grad_scale);
  // ZeRO-3 acquisitions served by a prefetched gather, so far (0 otherwise).
  int64_t prefetch_hits() const { return gatherer_ ? gatherer_->prefetched() : 0; }
  // Bytes the parameter gathers have written on this rank so far: ZeRO-3's for the model, ZeRO-1/2's
  // after the steps (0 for ZeRO-0).
  int64_t gathered_bytes() const {
    return (gatherer_ ? gatherer_->received_bytes() : 0) + updated_gathered_bytes_;
  }
  // Seconds this rank has spent inside the engine's communication since construction: starting,
  // testing and waiting for gradient reductions and ZeRO-3 gathers (with what completing them
  // does: accumulating a reduced bucket into the shard). Without a progress thread a rank does
  // nothing else meanwhile, so this is its exposed communication, measured directly instead of
  // as the difference of two noisy step times (bench overlap prints both).
  double communication_seconds() const { return gather_seconds_ + reduction_seconds_; }
  // Of which the parameter gathers (ZeRO-3's: starting, waiting for and releasing them; ZeRO-1/2's
  // after the step: starting and waiting for them, where they are waited for); the rest is the
  // gradient buckets' (under ZeRO-2/3 a bucket's buffer is allocated and zeroed when backward first
  // writes it) and their reductions.
  double gather_seconds() const { return gather_seconds_; }
  // Every parameter, full (logical), exact and unpadded, identical on all ranks (a collective for
  // stage 3, for stages 1-2 with bf16 operand gathers, and under tensor parallelism).
  std::vector<std::vector<double>> gather_params();
  // What this rank holds, in logical coordinates, for checkpoints: parameters and AdamW moments,
  // one region per ZeRO slice piece (this rank's, and for state it holds in full, every rank's),
  // written by the piece's DP owner only, and only where writes[tensor] (the trainer's say over
  // tensor- and pipeline-parallel replicas). Local (no communication).
  std::vector<StateRegion> state_regions(const std::vector<bool>& writes);

  // ParamAccess
  const Tensor& param(std::size_t index) override;
  const Tensor& grad(std::size_t index) override;
  void acquire_params(int group) override;
  void release_params(int group) override;
  void acquire_grads(int group) override;
  void grads_ready(int group) override;
  void grads_ready_except_rows(int group, std::size_t sparse, const Tensor& rows) override;
  // Elements in the last split bucket's second reduction (0 when none has split).
  int64_t last_split_elements() const { return buckets_->last_split_elements(); }
  int64_t last_split_first_elements() const { return buckets_->last_split_first_elements(); }

 private:
  std::vector<double> local_initial(std::size_t tensor, uint64_t seed) const;
  // Waits for the overlapped after-step gather of tensor's bucket / of every bucket (no-op when none).
  void wait_updated_params(std::size_t tensor);
  void settle_updated_params();
  // This rank's rows of tensor `sparse` among the logical row ids (int32 on the host): the same
  // rows without tensor parallelism, those of its vocabulary shard with it; sorted, each once.
  std::vector<int64_t> local_rows(std::size_t sparse, const Tensor& rows) const;
  enum class Traffic { Gathers, Reductions };
  template <class F>
  void timed(Traffic traffic, F&& communicate) {
    const auto start = std::chrono::steady_clock::now();
    communicate();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (traffic == Traffic::Gathers ? gather_seconds_ : reduction_seconds_) += seconds;
  }

  std::vector<ParamSpec> specs_;
  FaultPlan faults_;
  ZeroPolicy policy_;
  DType dtype_;
  Communicator& dp_;
  Backend& backend_;
  ShardLayout layout_;
  ZeroBuffers buffers_;
  std::vector<Tensor> param_views_, grad_views_;  // per tensor, into the full buffers (stages 0-2 / 0-1)
  TransientMemory transient_;
  std::unique_ptr<TensorParallelShards> tp_;
  std::unique_ptr<GradientBuckets> buckets_;
  std::unique_ptr<ParamGatherer> gatherer_;  // stage 3
  std::unique_ptr<ShardedOptimizer> optimizer_;
  std::unique_ptr<UpdatedParamGather> updated_gather_;  // stages 1-2, overlapped: in flight until waited
  std::vector<std::size_t> bucket_of_tensor_;
  int64_t updated_gathered_bytes_ = 0;
  bool overlap_param_gather_ = false;  // ZeroSettings::overlap_param_gather
  double gather_seconds_ = 0, reduction_seconds_ = 0;
  std::vector<int> sparse_groups_;  // ZeroSettings::sparse_groups
  bool bf16_operand_gathers_ = false;  // ZeroSettings::bf16_operand_gathers
  int backwards_since_zero_ = 0;    // backward passes since zero_grads()
};

}  // namespace tripod
