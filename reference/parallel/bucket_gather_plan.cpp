#include "parallel/bucket_gather_plan.h"

#include <algorithm>

#include "core/error.h"

namespace tripod {

BucketGatherPlan plan_bucket_gather(const Bucket& bucket, int dp, bool bf16_operand_gathers) {
  check(dp >= 1 && bucket.size % dp == 0, "plan_bucket_gather: a bucket of ", bucket.size,
        " elements does not split into ", dp, " slices");
  check(bucket.exact >= 0 && bucket.exact <= bucket.end && bucket.end <= bucket.size,
        "plan_bucket_gather: bucket with exact ", bucket.exact, ", end ", bucket.end, ", size ", bucket.size);
  BucketGatherPlan plan;
  // bf16 [size] + fp32 [exact] against fp32 [size]
  plan.rounded = bf16_operand_gathers && bucket.exact < bucket.end && 2 * bucket.exact < bucket.size;
  if (!plan.rounded) return plan;
  const int64_t slice = bucket.size / dp;
  for (int64_t begin = 0; begin < bucket.exact; begin += slice)
    plan.head.push_back({static_cast<int>(begin / slice), begin, std::min(bucket.exact, begin + slice) - begin});
  return plan;
}

std::vector<std::unique_ptr<CommRequest>> broadcast_head(const BucketGatherPlan& plan, const Tensor& head,
                                                         Communicator& dp) {
  std::vector<std::unique_ptr<CommRequest>> requests;
  for (const auto& piece : plan.head)  // in place: the root's piece is the source
    requests.push_back(dp.broadcast_async(head.view(piece.begin, {piece.length}), piece.root));
  return requests;
}

RoundedGather start_rounded_gather(const BucketGatherPlan& plan, const Tensor& own, const Tensor& head,
                                   Communicator& dp, Backend& backend) {
  RoundedGather g;
  g.sent = backend.alloc_for_overwrite({own.numel()}, DType::BF16);
  g.gathered = backend.alloc_for_overwrite({own.numel() * dp.size()}, DType::BF16);
  backend.convert(own, g.sent);
  g.requests.push_back(dp.all_gather_async(g.sent, g.gathered));
  for (auto& request : broadcast_head(plan, head, dp)) g.requests.push_back(std::move(request));
  return g;
}

}  // namespace tripod
