#include "parallel/updated_param_gather.h"

#include <algorithm>
#include <deque>
#include <memory>

#include "core/error.h"

namespace tripod {

namespace {

struct Pending {  // a rounded bucket's gather in flight
  const Bucket* bucket = nullptr;
  RoundedGather travel;
};

}  // namespace

int64_t gather_updated_params(const ShardLayout& layout, const Tensor& full_params, Communicator& dp,
                              Backend& backend, TransientMemory& memory, bool bf16_operand_gathers,
                              bool round_own_slices) {
  check(!bf16_operand_gathers || full_params.dtype() == DType::F32,
        "ZeRO: bf16 operand gathers need fp32 parameters, not ", dtype_name(full_params.dtype()));
  const int rank = dp.rank();
  int64_t received = 0;
  // Widens a rounded bucket into every slice but this rank's, over [exact, end).
  auto finish = [&](Pending& p) {
    p.travel.wait();
    const Bucket& bucket = *p.bucket;
    const int64_t slice = bucket.size / layout.dp();
    // (the fault: an empty own slice, so the widening overwrites the master with its rounding)
    const int64_t own_begin = round_own_slices ? 0 : rank * slice, own_end = round_own_slices ? 0 : own_begin + slice;
    for (const auto& [begin, end] : {std::pair{bucket.exact, std::min(bucket.end, own_begin)},
                                     std::pair{std::max(bucket.exact, own_end), bucket.end}})
      if (begin < end)
        backend.convert(p.travel.gathered.view(begin, {end - begin}),
                        full_params.view(bucket.start + begin, {end - begin}));
    memory.add(-static_cast<std::ptrdiff_t>(p.travel.bytes()));
  };
  std::deque<Pending> rounded;                        // at most two: their bf16 buffers
  std::vector<std::unique_ptr<CommRequest>> in_place;  // fp32 buckets, waited for at the end
  const int64_t master_bytes = static_cast<int64_t>(dtype_size(full_params.dtype()));  // per element
  for (const Bucket& bucket : layout.buckets()) {
    const BucketGatherPlan plan = plan_bucket_gather(bucket, layout.dp(), bf16_operand_gathers);
    const Tensor full = full_params.view(bucket.start, {bucket.size});
    const int64_t slice = bucket.size / layout.dp();
    const Tensor own = full.view(rank * slice, {slice});
    if (!plan.rounded) {
      in_place.push_back(dp.all_gather_async(own, full));
      received += bucket.size * master_bytes;
      continue;
    }
    if (rounded.size() == 2) {  // the next bucket travels while this one is widened
      finish(rounded.front());
      rounded.pop_front();
    }
    // The head travels in place: its pieces' roots hold them in their own slices.
    Pending p{&bucket, start_rounded_gather(plan, own, full, dp, backend)};
    memory.add(static_cast<std::ptrdiff_t>(p.travel.bytes()));
    received += static_cast<int64_t>(p.travel.gathered.bytes()) + bucket.exact * master_bytes;
    rounded.push_back(std::move(p));
  }
  for (Pending& p : rounded) finish(p);
  for (auto& request : in_place) request->wait();
  return received;
}

}  // namespace tripod
