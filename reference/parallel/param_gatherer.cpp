#include "parallel/param_gatherer.h"

#include <algorithm>
#include <exception>
#include <limits>

namespace tripod {

struct ParamGatherer::InFlight {
  std::unique_ptr<CommRequest> request;  // an fp32 bucket's all-gather
  // A rounded bucket's travel (its sent slice freed on arrival) and its exact head [exact] in fp32;
  // the gathered bf16 bucket and the head become the bucket's buffers.
  RoundedGather rounded;
  Tensor exact;
  std::size_t bytes() const { return rounded.bytes() + exact.bytes(); }
  void wait() {
    if (request) request->wait();
    rounded.wait();
  }
};

ParamGatherer::ParamGatherer(const ShardLayout& layout, const std::vector<ParamSpec>& specs, Communicator& dp,
                             Backend& backend, DType dtype, Tensor param_shard, TransientMemory& memory,
                             const FaultPlan& faults, int prefetch, bool bf16_operand_gathers)
    : layout_(layout),
      specs_(specs),
      dp_(dp),
      backend_(backend),
      dtype_(dtype),
      param_shard_(std::move(param_shard)),
      memory_(memory),
      faults_(faults),
      // The stale-parameters fault reuses its first gather; prefetching would only hide that.
      prefetch_(faults.has(Fault::StaleZero3Params) ? 0 : prefetch),
      gathered_(layout.buckets().size()),
      operands_(layout.buckets().size()),
      in_flight_(layout.buckets().size()),
      users_(layout.buckets().size(), 0),
      views_(specs.size()),
      stale_(layout.buckets().size()) {
  check(prefetch >= 0, "ZeRO-3 prefetch must be >= 0 buckets (got ", prefetch, ")");
  check(!bf16_operand_gathers || dtype == DType::F32, "ZeRO-3: bf16 operand gathers need fp32 parameters, not ",
        dtype_name(dtype));
  for (const Bucket& bucket : layout.buckets())
    plans_.push_back(plan_bucket_gather(bucket, layout.dp(), bf16_operand_gathers));
}

ParamGatherer::~ParamGatherer() {
  // Unwinding from an error, a wait could hang (the peer may itself wait for this rank): the
  // requests' own destructors then leave the operations to the communicator (see MpiRequest).
  if (std::uncaught_exceptions() > 0) return;
  for (auto& f : in_flight_)  // collectives already started must complete on every rank
    if (f) f->wait();
}

Tensor ParamGatherer::gather_bucket(int b) const {
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  Tensor buffer = backend_.alloc({bucket.size}, dtype_);
  dp_.all_gather(param_shard_.view(layout_.shard_offset(b), {bucket.size / layout_.dp()}), buffer);
  return buffer;
}

const BucketGatherPlan& ParamGatherer::plan_of(int b) const { return plans_[static_cast<std::size_t>(b)]; }

void ParamGatherer::start_gather(int b) {
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  const int64_t slice_size = bucket.size / layout_.dp();
  const Tensor slice = param_shard_.view(layout_.shard_offset(b), {slice_size});
  auto flight = std::make_unique<InFlight>();
  const BucketGatherPlan& plan = plan_of(b);
  if (!plan.rounded) {
    Tensor buffer = backend_.alloc({bucket.size}, dtype_);
    account(static_cast<std::ptrdiff_t>(buffer.bytes()));
    received_bytes_ += static_cast<int64_t>(buffer.bytes());
    flight->request = dp_.all_gather_async(slice, buffer);
    gathered_[static_cast<std::size_t>(b)] = buffer;
  } else {
    // The exact head [0, exact) at its bucket offsets in an fp32 [exact] of its own: each piece's
    // root copies it in from its slice before the broadcasts start.
    if (bucket.exact > 0) {
      flight->exact = backend_.alloc_for_overwrite({bucket.exact}, dtype_);  // every piece is written
      for (const auto& piece : plan.head)
        if (piece.root == dp_.rank())
          backend_.copy(slice.view(piece.begin - piece.root * slice_size, {piece.length}),
                        flight->exact.view(piece.begin, {piece.length}));
    }
    flight->rounded = start_rounded_gather(plan, slice, flight->exact, dp_, backend_);
    account(static_cast<std::ptrdiff_t>(flight->bytes()));
    received_bytes_ += static_cast<int64_t>(flight->rounded.gathered.bytes() + flight->exact.bytes());
  }
  in_flight_[static_cast<std::size_t>(b)] = std::move(flight);
}

void ParamGatherer::finish_gather(int b) {
  auto& flight = in_flight_[static_cast<std::size_t>(b)];
  if (!flight) return;
  flight->wait();
  if (flight->rounded.gathered.defined()) {  // the sent slice goes; the bucket is the two gathered buffers
    account(-static_cast<std::ptrdiff_t>(flight->rounded.sent.bytes()));
    gathered_[static_cast<std::size_t>(b)] = flight->exact;
    operands_[static_cast<std::size_t>(b)] = flight->rounded.gathered;
  }
  flight.reset();
}

void ParamGatherer::begin_pass(PassKind kind) {
  // Leftovers of the previous pass (prefetched for an acquisition that did not come) go; a bucket
  // still in use (a pass interrupted by an error) stays with its users.
  drop_unused();
  if (trace_ && !trace_->recorded) trace_->recorded = true;  // the first pass of its kind is complete
  trace_ = &traces_[kind == PassKind::Forward ? 0 : 1];
  cursor_ = 0;
}

void ParamGatherer::prefetch_after(std::size_t event) {
  if (prefetch_ == 0 || !trace_ || !trace_->recorded || !trace_->valid) return;
  std::vector<int> window;  // the next `prefetch` distinct buckets not in use now
  for (std::size_t e = event + 1; e < trace_->events.size() && static_cast<int>(window.size()) < prefetch_; ++e) {
    const int b = trace_->events[e];
    if (users_[static_cast<std::size_t>(b)] > 0 || std::find(window.begin(), window.end(), b) != window.end())
      continue;  // in use now (it will be kept, not gathered), or counted already
    window.push_back(b);
    if (!held(b)) start_gather(b);
  }
}

void ParamGatherer::acquire(int group) {
  const int b = layout_.bucket_of_group(group);
  if (users_[static_cast<std::size_t>(b)]++ > 0) return;
  const std::size_t event = cursor_++;
  if (trace_ && !trace_->recorded) {
    trace_->events.push_back(b);
  } else if (trace_ && trace_->valid && (event >= trace_->events.size() || trace_->events[event] != b)) {
    trace_->valid = false;  // this pass is not the recorded one: no more guessing
    drop_unused();
  }
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  Tensor& buffer = gathered_[static_cast<std::size_t>(b)];
  const Tensor& operands = operands_[static_cast<std::size_t>(b)];
  if (faults_.has(Fault::StaleZero3Params)) {  // the bug: what was gathered first is used for ever
    Tensor& first = stale_[static_cast<std::size_t>(b)];
    if (!first.defined()) first = gather_bucket(b);
    buffer = backend_.alloc({bucket.size}, dtype_);
    account(static_cast<std::ptrdiff_t>(buffer.bytes()));
    backend_.copy(first, buffer);
  } else if (held(b)) {  // prefetched (perhaps still travelling) or kept from the last use
    prefetch_hits_ += in_flight_[static_cast<std::size_t>(b)] != nullptr;
    finish_gather(b);
  } else if (plan_of(b).rounded) {
    start_gather(b);
    finish_gather(b);
  } else {
    buffer = gather_bucket(b);
    account(static_cast<std::ptrdiff_t>(buffer.bytes()));
    received_bytes_ += static_cast<int64_t>(buffer.bytes());
  }
  for (std::size_t i : bucket.tensors) {  // a rounded bucket's operand-only tensors: bf16, in `operands`
    const int64_t at = layout_.offsets()[i] - bucket.start;
    views_[i] = (operands.defined() && at >= bucket.exact ? operands : buffer).view(at, specs_[i].shape);
  }
  prefetch_after(event);
  if (faults_.has(Fault::UseAfterRelease)) drop(b);  // the bug: released before the model reads the views
}

void ParamGatherer::drop(int b) {
  finish_gather(b);
  for (Tensor* buffer : {&gathered_[static_cast<std::size_t>(b)], &operands_[static_cast<std::size_t>(b)]}) {
    if (!buffer->defined()) continue;
    // Poisoned, so that a view someone kept cannot go on reading the old values unnoticed.
    if (faults_.poison_released()) backend_.fill(*buffer, std::numeric_limits<double>::quiet_NaN());
    account(-static_cast<std::ptrdiff_t>(buffer->bytes()));
    *buffer = Tensor();
  }
}

void ParamGatherer::release(int group) {
  const int b = layout_.bucket_of_group(group);
  if (--users_[static_cast<std::size_t>(b)] > 0) return;
  for (std::size_t i : layout_.buckets()[static_cast<std::size_t>(b)].tensors) views_[i] = Tensor();
  // The trace's next acquisition is this bucket again (its next group): keep it for that.
  const bool next_is_this = !faults_.has(Fault::StaleZero3Params) && trace_ && trace_->recorded && trace_->valid &&
                            cursor_ < trace_->events.size() && trace_->events[cursor_] == b;
  if (!next_is_this) drop(b);
}

void ParamGatherer::drop_unused() {
  for (std::size_t b = 0; b < gathered_.size(); ++b)
    if (users_[b] == 0 && held(static_cast<int>(b))) drop(static_cast<int>(b));
}

void ParamGatherer::drop_all() {
  for (std::size_t b = 0; b < gathered_.size(); ++b) {
    check(users_[b] == 0, "ZeRO-3: parameters of bucket ", b, " dropped while in use");
    drop(static_cast<int>(b));
  }
}

const Tensor& ParamGatherer::view(std::size_t tensor) const {
  if (!views_[tensor].defined()) fail("ZeRO-3: parameter '", specs_[tensor].name, "' used outside acquire/release");
  return views_[tensor];
}

}  // namespace tripod
