#include "parallel/sharded_optimizer.h"

#include "backend/transfer.h"

namespace tripod {

ShardedOptimizer::ShardedOptimizer(const ShardLayout& layout, const std::vector<ParamSpec>& specs,
                                   const ZeroPolicy& policy, const ZeroBuffers& buffers, Communicator& dp,
                                   Backend& backend, DType dtype, AdamWConfig adamw, const FaultPlan& faults)
    : layout_(layout),
      specs_(specs),
      policy_(policy),
      buffers_(buffers),
      dp_(dp),
      backend_(backend),
      adamw_(adamw),
      faults_(faults),
      segments_(layout.segments(dp.rank())) {
  const int64_t moments = policy_.shard_optimizer ? layout_.shard_elements() : layout_.total();
  m_ = backend_.alloc({moments}, dtype);
  v_ = backend_.alloc({moments}, dtype);
}

void ShardedOptimizer::zero_state() {
  backend_.fill(m_, 0.0);
  backend_.fill(v_, 0.0);
}

Tensor ShardedOptimizer::tensor_in(const Tensor& flat, std::size_t i) const {
  return flat.view(layout_.offsets()[i], specs_[i].shape);
}

Tensor ShardedOptimizer::grad_piece(const ShardLayout::Segment& seg) const {
  return policy_.full_grads && !policy_.shard_optimizer ? buffers_.full_grads.view(seg.flat, {seg.length})
                                                        : buffers_.grad_shard.view(seg.local, {seg.length});
}

std::vector<std::pair<std::size_t, Tensor>> ShardedOptimizer::updated_grad_pieces() const {
  std::vector<std::pair<std::size_t, Tensor>> pieces;
  if (!policy_.shard_optimizer) {
    for (std::size_t i = 0; i < specs_.size(); ++i) pieces.emplace_back(i, tensor_in(buffers_.full_grads, i));
    return pieces;
  }
  for (const auto& seg : segments_) pieces.emplace_back(seg.tensor, grad_piece(seg));
  return pieces;
}

Tensor ShardedOptimizer::grad_sum_squares(const std::function<bool(std::size_t)>& counted) {
  Tensor sum = alloc_scalar(backend_);  // stays on the device; the step reads it back once
  for (const auto& seg : segments_)
    if (counted(seg.tensor)) backend_.sum_squares(sum, grad_piece(seg));
  if (!faults_.has(Fault::NormSkipsDataParallel)) dp_.all_reduce(sum, sum, ReduceOp::Sum);
  return sum;
}

void ShardedOptimizer::step(double lr, int64_t step, double grad_scale) {
  auto decay_of = [&](std::size_t i) { return decays(specs_[i], adamw_.decay_policy) ? adamw_.weight_decay : 0.0; };
  if (!policy_.shard_optimizer) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const int64_t at = layout_.offsets()[i], n = shape_numel(specs_[i].shape);
      backend_.adamw(tensor_in(buffers_.full_params, i), tensor_in(buffers_.full_grads, i), m_.view(at, {n}),
                     v_.view(at, {n}), lr, adamw_.beta1, adamw_.beta2, adamw_.eps, decay_of(i), step, grad_scale);
    }
    return;
  }
  for (const auto& seg : segments_) {
    const Tensor param = policy_.full_params ? buffers_.full_params.view(seg.flat, {seg.length})
                                             : buffers_.param_shard.view(seg.local, {seg.length});
    backend_.adamw(param, buffers_.grad_shard.view(seg.local, {seg.length}), m_.view(seg.local, {seg.length}),
                   v_.view(seg.local, {seg.length}), lr, adamw_.beta1, adamw_.beta2, adamw_.eps, decay_of(seg.tensor),
                   step, grad_scale);
  }
}

}  // namespace tripod
