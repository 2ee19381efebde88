// The data-parallel reduction of gradients in buckets (parallel/shard_layout.h). A bucket's
// reduction is launched as soon as backward reports all its parameter groups ready, so it overlaps
// the rest of backward; every hook also test()s the reductions in flight, because Open MPI advances
// non-blocking collectives only inside MPI calls. Per the ZeRO policy:
//   all-reduce (stage 0)      the bucket of the full gradients, in place
//   reduce-scatter (1)        the bucket of the full gradients into this rank's gradient shard
//   reduce-scatter (2-3)      a bucket-sized buffer that exists only while the bucket is in use:
//                             in place into this rank's block, then added into the gradient shard
// Deferred buckets (a pipeline's tied embedding, summed across stages first) are held back until
// reduce_deferred().
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/fault_plan.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_policy.h"

namespace tripod {

class GradientBuckets {
 public:
  // full_grads: the padded full gradients (stages 0-1, else undefined); grad_shard: this rank's
  // shard of the reduced gradients (stages 1-3, else undefined). The layout, specs, memory and
  // fault plan must outlive this object.
  GradientBuckets(const ShardLayout& layout, const std::vector<ParamSpec>& specs, const ZeroPolicy& policy,
                  Communicator& dp, Backend& backend, DType dtype, Tensor full_grads, Tensor grad_shard,
                  TransientMemory& memory, const FaultPlan& faults);
  ~GradientBuckets();

  void defer(int bucket) { deferred_[static_cast<std::size_t>(bucket)] = true; }
  // Before each micro-batch's backward; reductions are launched only when `reduce` is true (or the
  // policy reduces every micro-batch).
  void begin_backward(bool reduce);
  // Stages 2-3: the zeroed bucket buffer that gradients of `group` accumulate in (made on first use).
  void acquire(int group);
  const Tensor& view(std::size_t tensor) const;  // tensor's gradient in its bucket buffer (stages 2-3)
  void ready(int group);   // the group's gradients are final for this backward
  void progress();         // completes whatever MPI has finished
  void finish();           // waits for every reduction of this backward
  void reduce_deferred();  // launches the deferred buckets and waits for them

 private:
  struct Pending;
  void launch(int bucket);
  void complete(Pending& pending);
  Tensor bucket_of(const Tensor& flat, int bucket) const;

  const ShardLayout& layout_;
  const std::vector<ParamSpec>& specs_;
  ZeroPolicy policy_;
  Communicator& dp_;
  Backend& backend_;
  DType dtype_;
  Tensor full_grads_, grad_shard_;
  TransientMemory& memory_;
  const FaultPlan& faults_;
  std::vector<Tensor> buffers_;    // per bucket, while in use (stages 2-3)
  std::vector<Tensor> views_;      // per tensor, into buffers_
  std::vector<int> groups_ready_;  // per bucket, this backward
  std::vector<bool> deferred_;
  std::vector<std::unique_ptr<Pending>> pending_;
  bool reduce_ = false;
};

}  // namespace tripod
