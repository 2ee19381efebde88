// ZeRO-3's parameters: each rank keeps its shard; a bucket's parameters are all-gathered when the
// model acquires one of its groups and dropped when the last user releases it (NaN-filled first
// when the fault plan poisons released buffers, so that a read after release cannot pass).
#pragma once
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/fault_plan.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_policy.h"

namespace tripod {

class ParamGatherer {
 public:
  // param_shard (this rank's slices of every bucket) must outlive the gatherer.
  ParamGatherer(const ShardLayout& layout, const std::vector<ParamSpec>& specs, Communicator& dp, Backend& backend,
                DType dtype, Tensor param_shard, TransientMemory& memory, const FaultPlan& faults);

  void acquire(int group);                       // gathers the group's bucket on its first user
  void release(int group);                       // frees it after its last
  const Tensor& view(std::size_t tensor) const;  // the tensor in its gathered bucket, while acquired
  // The whole bucket, gathered into a fresh buffer (for reports and checkpoints; no bookkeeping).
  Tensor gather_bucket(int bucket) const;

 private:
  const ShardLayout& layout_;
  const std::vector<ParamSpec>& specs_;
  Communicator& dp_;
  Backend& backend_;
  DType dtype_;
  Tensor param_shard_;
  TransientMemory& memory_;
  const FaultPlan& faults_;
  std::vector<Tensor> gathered_;  // per bucket, while acquired
  std::vector<int> users_;        // per bucket
  std::vector<Tensor> views_;     // per tensor
  std::vector<Tensor> stale_;     // per bucket: the first gathered copy (the stale-parameters fault)
  void drop(int bucket);          // the last user is done: poison (if asked) and free
};

}  // namespace tripod
