#include "parallel/gradient_buckets.h"

#include <limits>

namespace tripod {

struct GradientBuckets::Pending {
  std::unique_ptr<CommRequest> request;
  int bucket = 0;
  bool done = false;
};

GradientBuckets::GradientBuckets(const ShardLayout& layout, const std::vector<ParamSpec>& specs,
                                 const ZeroPolicy& policy, Communicator& dp, Backend& backend, DType dtype,
                                 Tensor full_grads, Tensor grad_shard, TransientMemory& memory, const FaultPlan& faults)
    : layout_(layout),
      specs_(specs),
      policy_(policy),
      dp_(dp),
      backend_(backend),
      dtype_(dtype),
      full_grads_(std::move(full_grads)),
      grad_shard_(std::move(grad_shard)),
      memory_(memory),
      faults_(faults),
      buffers_(layout.buckets().size()),
      views_(specs.size()),
      groups_ready_(layout.buckets().size(), 0),
      deferred_(layout.buckets().size(), false) {}

GradientBuckets::~GradientBuckets() = default;

Tensor GradientBuckets::bucket_of(const Tensor& flat, int bucket) const {
  const Bucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  return flat.view(b.start, {b.size});
}

void GradientBuckets::begin_backward(bool reduce) {
  check(pending_.empty(), "ZeroEngine: a backward pass began with reductions still in flight");
  reduce_ = reduce || policy_.reduce_every_microbatch;
  std::fill(groups_ready_.begin(), groups_ready_.end(), 0);
}

void GradientBuckets::acquire(int group) {
  progress();
  if (policy_.full_grads) return;
  const int b = layout_.bucket_of_group(group);
  if (buffers_[static_cast<std::size_t>(b)].defined()) return;
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  Tensor buffer = backend_.alloc({bucket.size}, dtype_);  // zeroed
  memory_.add(static_cast<std::ptrdiff_t>(buffer.bytes()));
  for (std::size_t i : bucket.tensors) views_[i] = buffer.view(layout_.offsets()[i] - bucket.start, specs_[i].shape);
  buffers_[static_cast<std::size_t>(b)] = buffer;
}

const Tensor& GradientBuckets::view(std::size_t tensor) const {
  if (!views_[tensor].defined())
    fail("ZeRO-", policy_.stage, ": gradient of '", specs_[tensor].name, "' used outside acquire/release");
  return views_[tensor];
}

void GradientBuckets::ready(int group) {
  const int b = layout_.bucket_of_group(group);
  const std::size_t needed = layout_.buckets()[static_cast<std::size_t>(b)].groups.size();
  if (static_cast<std::size_t>(++groups_ready_[static_cast<std::size_t>(b)]) == needed && reduce_ &&
      !deferred_[static_cast<std::size_t>(b)])
    launch(b);
  progress();
}

void GradientBuckets::launch(int b) {
  auto pending = std::make_unique<Pending>();
  pending->bucket = b;
  const int64_t slice = layout_.buckets()[static_cast<std::size_t>(b)].size / layout_.dp();
  if (b == 0 && faults_.has(Fault::SkipGradReduction)) {  // this rank's own gradients stand in for the sum
    if (policy_.full_grads && policy_.reduce_scatter)
      backend_.copy(bucket_of(full_grads_, b).view(dp_.rank() * slice, {slice}),
                    grad_shard_.view(layout_.shard_offset(b), {slice}));
    pending->request = std::make_unique<CompletedRequest>();
  } else if (!policy_.reduce_scatter) {
    const Tensor grads = bucket_of(full_grads_, b);
    pending->request = dp_.all_reduce_async(grads, grads, ReduceOp::Sum);
  } else if (policy_.full_grads) {
    pending->request = dp_.reduce_scatter_async(bucket_of(full_grads_, b),
                                                grad_shard_.view(layout_.shard_offset(b), {slice}), ReduceOp::Sum);
  } else {  // in place into this rank's block of the bucket buffer; accumulated into the shard on completion
    const Tensor& buffer = buffers_[static_cast<std::size_t>(b)];
    pending->request = dp_.reduce_scatter_async(buffer, buffer.view(dp_.rank() * slice, {slice}), ReduceOp::Sum);
  }
  pending_.push_back(std::move(pending));
}

void GradientBuckets::complete(Pending& p) {
  if (p.done) return;
  p.done = true;
  // A request holds its tensors (so that they outlive the transfer): a finished one must let go,
  // or the bucket buffer freed below stays allocated until the whole backward is over.
  p.request.reset();
  if (policy_.full_grads) return;
  const std::size_t b = static_cast<std::size_t>(p.bucket);
  const Bucket& bucket = layout_.buckets()[b];
  const int64_t slice = bucket.size / layout_.dp();
  backend_.add_inplace(grad_shard_.view(layout_.shard_offset(p.bucket), {slice}),
                       buffers_[b].view(dp_.rank() * slice, {slice}));
  for (std::size_t i : bucket.tensors) views_[i] = Tensor();
  if (faults_.poison_released()) backend_.fill(buffers_[b], std::numeric_limits<double>::quiet_NaN());
  memory_.add(-static_cast<std::ptrdiff_t>(buffers_[b].bytes()));
  buffers_[b] = Tensor();
}

void GradientBuckets::progress() {
  for (auto& p : pending_)
    if (!p->done && p->request->test()) complete(*p);
}

void GradientBuckets::finish() {
  for (auto& p : pending_) {
    if (p->done) continue;
    p->request->wait();
    complete(*p);
  }
  pending_.clear();
}

void GradientBuckets::reduce_deferred() {
  check(pending_.empty(), "ZeroEngine: deferred reductions started with others still in flight");
  for (std::size_t b = 0; b < deferred_.size(); ++b) {
    if (!deferred_[b]) continue;
    // Stages 2-3 kept the bucket's buffer across the micro-batches (it always exists after a backward).
    if (!policy_.full_grads && !buffers_[b].defined()) acquire(layout_.buckets()[b].groups.front());
    launch(static_cast<int>(b));
  }
  finish();
}

}  // namespace tripod
