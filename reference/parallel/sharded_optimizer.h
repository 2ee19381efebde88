// AdamW under ZeRO: on every tensor (stage 0) or on this rank's slices of every bucket (stages
// 1-3, with m and v of shard size); stages 1-2's owner (ZeroEngine) then all-gathers the updated
// slices back into the full parameters (parallel/updated_param_gather.h). Also the sum of squares of the reduced gradients this rank holds, the
// ingredient of the global norm: every stage sums the same pieces of its slices in flat order,
// so the norm (and the clipping it drives) is bit-identical between stages given equal gradients.
#pragma once
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "optim/adamw.h"
#include "parallel/fault_plan.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_policy.h"

namespace tripod {

class ShardedOptimizer {
 public:
  // `buffers` must outlive the optimizer.
  ShardedOptimizer(const ShardLayout& layout, const std::vector<ParamSpec>& specs, const ZeroPolicy& policy,
                   const ZeroBuffers& buffers, Communicator& dp, Backend& backend, DType dtype, AdamWConfig adamw,
                   const FaultPlan& faults);

  void zero_state();  // m = v = 0
  void step(double lr, int64_t step, double grad_scale);
  std::size_t bytes() const { return m_.bytes() + v_.bytes(); }

  // fp64 [1] on the device: the sum over this rank's slices of the reduced gradients' squares,
  // summed over the DP group (collective); tensors for which counted(index) is false are left out.
  Tensor grad_sum_squares(const std::function<bool(std::size_t tensor)>& counted);
  // The reduced gradient pieces this rank's update reads: every whole tensor (stage 0) or the
  // pieces of its slices (1-3), as (tensor index, piece).
  std::vector<std::pair<std::size_t, Tensor>> updated_grad_pieces() const;
  // This rank's reduced gradient of one of its slices' segments.
  Tensor grad_piece(const ShardLayout::Segment& segment) const;
  const std::vector<ShardLayout::Segment>& segments() const { return segments_; }
  // AdamW's moments: indexed like the flat buffer (stage 0) or like this rank's shard (1-3).
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }

 private:
  Tensor tensor_in(const Tensor& flat, std::size_t i) const;

  const ShardLayout& layout_;
  const std::vector<ParamSpec>& specs_;
  ZeroPolicy policy_;
  const ZeroBuffers& buffers_;
  Communicator& dp_;
  Backend& backend_;
  AdamWConfig adamw_;
  const FaultPlan& faults_;
  std::vector<ShardLayout::Segment> segments_;  // this DP rank's pieces of its slices (fixed)
  Tensor m_, v_;                                // full (stage 0) or shard-sized
};

}  // namespace tripod
