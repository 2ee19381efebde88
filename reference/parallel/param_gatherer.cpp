#include "parallel/param_gatherer.h"

#include <limits>

namespace tripod {

ParamGatherer::ParamGatherer(const ShardLayout& layout, const std::vector<ParamSpec>& specs, Communicator& dp,
                             Backend& backend, DType dtype, Tensor param_shard, TransientMemory& memory,
                             const FaultPlan& faults)
    : layout_(layout),
      specs_(specs),
      dp_(dp),
      backend_(backend),
      dtype_(dtype),
      param_shard_(std::move(param_shard)),
      memory_(memory),
      faults_(faults),
      gathered_(layout.buckets().size()),
      users_(layout.buckets().size(), 0),
      views_(specs.size()),
      stale_(layout.buckets().size()) {}

Tensor ParamGatherer::gather_bucket(int b) const {
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  Tensor buffer = backend_.alloc({bucket.size}, dtype_);
  dp_.all_gather(param_shard_.view(layout_.shard_offset(b), {bucket.size / layout_.dp()}), buffer);
  return buffer;
}

void ParamGatherer::acquire(int group) {
  const int b = layout_.bucket_of_group(group);
  if (users_[static_cast<std::size_t>(b)]++ > 0) return;
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  Tensor buffer;
  if (faults_.has(Fault::StaleZero3Params)) {  // the bug: what was gathered first is used for ever
    Tensor& first = stale_[static_cast<std::size_t>(b)];
    if (!first.defined()) first = gather_bucket(b);
    buffer = backend_.alloc({bucket.size}, dtype_);
    backend_.copy(first, buffer);
  } else {
    buffer = gather_bucket(b);
  }
  memory_.add(static_cast<std::ptrdiff_t>(buffer.bytes()));
  for (std::size_t i : bucket.tensors) views_[i] = buffer.view(layout_.offsets()[i] - bucket.start, specs_[i].shape);
  gathered_[static_cast<std::size_t>(b)] = buffer;
  if (faults_.has(Fault::UseAfterRelease)) drop(b);  // the bug: released before the model reads the views
}

void ParamGatherer::drop(int b) {
  Tensor& buffer = gathered_[static_cast<std::size_t>(b)];
  if (!buffer.defined()) return;
  // Poisoned, so that a view someone kept cannot go on reading the old values unnoticed.
  if (faults_.poison_released()) backend_.fill(buffer, std::numeric_limits<double>::quiet_NaN());
  memory_.add(-static_cast<std::ptrdiff_t>(buffer.bytes()));
  buffer = Tensor();
}

void ParamGatherer::release(int group) {
  const int b = layout_.bucket_of_group(group);
  if (--users_[static_cast<std::size_t>(b)] > 0) return;
  for (std::size_t i : layout_.buckets()[static_cast<std::size_t>(b)].tensors) views_[i] = Tensor();
  drop(b);
}

const Tensor& ParamGatherer::view(std::size_t tensor) const {
  if (!views_[tensor].defined()) fail("ZeRO-3: parameter '", specs_[tensor].name, "' used outside acquire/release");
  return views_[tensor];
}

}  // namespace tripod
