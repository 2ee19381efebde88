#include "parallel/updated_param_gather.h"

#include <algorithm>
#include <deque>
#include <exception>

#include "core/error.h"

namespace tripod {

UpdatedParamGather::UpdatedParamGather(const ShardLayout& layout, const Tensor& full_params, Communicator& dp,
                                       Backend& backend, TransientMemory& memory, bool bf16_operand_gathers,
                                       bool overlapped, bool round_own_slices, bool land_when_waited)
    : layout_(layout), full_params_(full_params), backend_(backend), memory_(memory),
      round_own_slices_(round_own_slices), rank_(dp.rank()), buckets_(layout.buckets().size()) {
  TRIPOD_CHECK(!bf16_operand_gathers || full_params.dtype() == DType::F32,
               "ZeRO: bf16 operand gathers need fp32 parameters, not ", dtype_name(full_params.dtype()));
  std::deque<std::size_t> rounded;  // blocking: the rounded buckets in flight, at most two
  const int64_t master_bytes = static_cast<int64_t>(dtype_size(full_params.dtype()));  // per element
  for (std::size_t b = 0; b < layout.buckets().size(); ++b) {
    const Bucket& bucket = layout.buckets()[b];
    const BucketGatherPlan plan = plan_bucket_gather(bucket, layout.dp(), bf16_operand_gathers);
    const Tensor full = full_params.view(bucket.start, {bucket.size});
    const int64_t slice = bucket.size / layout.dp();
    const Tensor own = full.view(rank_ * slice, {slice});
    ++in_flight_;
    if (!plan.rounded) {
      if (land_when_waited) {
        buckets_[b].landing = backend.alloc_for_overwrite({bucket.size}, full_params.dtype());
        memory_.add(static_cast<std::ptrdiff_t>(buckets_[b].landing.bytes()));
      }
      buckets_[b].in_place = dp.all_gather_async(own, land_when_waited ? buckets_[b].landing : full);
      received_ += bucket.size * master_bytes;
      continue;
    }
    if (!overlapped && rounded.size() == 2) {  // the next bucket travels while this one is widened
      finish(rounded.front());
      rounded.pop_front();
    }
    // The head travels in place: its pieces' roots hold them in their own slices.
    buckets_[b].rounded = std::make_unique<RoundedGather>(start_rounded_gather(plan, own, full, dp, backend));
    memory_.add(static_cast<std::ptrdiff_t>(buckets_[b].rounded->bytes()));
    received_ += static_cast<int64_t>(buckets_[b].rounded->gathered.bytes()) + bucket.exact * master_bytes;
    rounded.push_back(b);
  }
  if (!overlapped) wait_all();
}

UpdatedParamGather::~UpdatedParamGather() {
  for (InFlight& f : buckets_) {
    if (f.rounded) memory_.add(-static_cast<std::ptrdiff_t>(f.rounded->bytes()));
    if (f.landing.defined()) memory_.add(-static_cast<std::ptrdiff_t>(f.landing.bytes()));
  }
  // Unwinding from an error, a wait could hang (the peer may itself wait for this rank): the
  // requests' own destructors then leave the operations to the communicator (see MpiRequest).
  if (std::uncaught_exceptions() > 0) return;
  for (InFlight& f : buckets_) {
    if (f.in_place) f.in_place->wait();
    if (f.rounded) f.rounded->wait();
  }
}

void UpdatedParamGather::wait_bucket(std::size_t b) {
  TRIPOD_CHECK(b < buckets_.size(), "UpdatedParamGather: bucket ", b, " of ", buckets_.size());
  finish(b);
}

void UpdatedParamGather::wait_all() {
  for (std::size_t b = 0; b < buckets_.size() && in_flight_ > 0; ++b) finish(b);
}

// Completes bucket b: an fp32 one is in place when its all-gather is; a rounded one is widened into
// every slice but this rank's, over [exact, end).
void UpdatedParamGather::finish(std::size_t b) {
  InFlight& f = buckets_[b];
  const Bucket& bucket = layout_.buckets()[b];
  if (f.in_place) {
    f.in_place->wait();
    f.in_place.reset();
    if (f.landing.defined()) {  // the fault's: the gathered bucket lands only now
      backend_.copy(f.landing, full_params_.view(bucket.start, {bucket.size}));
      memory_.add(-static_cast<std::ptrdiff_t>(f.landing.bytes()));
      f.landing = Tensor();
    }
    --in_flight_;
  }
  if (!f.rounded) return;
  f.rounded->wait();
  const int64_t slice = bucket.size / layout_.dp();
  // (the fault: an empty own slice, so the widening overwrites the master with its rounding)
  const int64_t own_begin = round_own_slices_ ? 0 : rank_ * slice, own_end = round_own_slices_ ? 0 : own_begin + slice;
  for (const auto& [begin, end] : {std::pair{bucket.exact, std::min(bucket.end, own_begin)},
                                   std::pair{std::max(bucket.exact, own_end), bucket.end}})
    if (begin < end)
      backend_.convert(f.rounded->gathered.view(begin, {end - begin}),
                       full_params_.view(bucket.start + begin, {end - begin}));
  memory_.add(-static_cast<std::ptrdiff_t>(f.rounded->bytes()));
  f.rounded.reset();
  --in_flight_;
}

}  // namespace tripod
