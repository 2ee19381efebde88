// How a bucket's parameters travel under the bf16-operand policy, for every ZeRO stage: ZeRO-1/2's
// gather after the step (parallel/updated_param_gather.h) and ZeRO-3's gathers on use
// (parallel/param_gatherer.h) follow the same plan, so a bucket costs the same bytes in both.
//
// The weights the model reads only as GEMM operands lie last in their bucket, [exact, end)
// (parallel/shard_layout.h); the model reads nothing of them but their bf16 rounding. A rounded
// bucket travels as one bf16 all-gather (each rank's slice rounded, nearest even) while its exact
// head [0, exact) - LayerNorms, biases, embeddings - is broadcast in fp32 by the ranks whose
// slices hold it, a piece per slice it spans: bf16 [size] plus fp32 [exact] in all.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/shard_layout.h"

namespace tripod {

struct BucketGatherPlan {
  bool rounded = false;  // bf16 all-gather plus the head's broadcasts; else one fp32 all-gather
  struct HeadPiece {
    int root;        // the rank whose slice holds it
    int64_t begin;   // in the bucket
    int64_t length;
  };
  std::vector<HeadPiece> head;  // [0, exact) cut at slice boundaries (rounded buckets only)
};

// Rounded when asked (`bf16_operand_gathers`), the bucket holds operand-only tensors, and the bf16
// bucket plus the fp32 head are fewer bytes than the fp32 bucket (exact < size / 2).
BucketGatherPlan plan_bucket_gather(const Bucket& bucket, int dp, bool bf16_operand_gathers);

// Starts the broadcasts of the plan's head pieces over `head` (fp32, the bucket or at least its
// [0, exact), at the bucket's offsets), each from its root, which must hold its piece there
// already. Collective over `dp`: every rank starts the same pieces in the same order.
std::vector<std::unique_ptr<CommRequest>> broadcast_head(const BucketGatherPlan& plan, const Tensor& head,
                                                         Communicator& dp);

// A rounded bucket in flight: this rank's slice as bf16 [size / dp], the bucket as bf16 [size],
// and the requests of that all-gather and of the head's broadcasts.
struct RoundedGather {
  Tensor sent, gathered;
  std::vector<std::unique_ptr<CommRequest>> requests;
  std::size_t bytes() const { return sent.bytes() + gathered.bytes(); }
  void wait() {
    for (auto& request : requests) request->wait();
  }
};

// Starts a rounded bucket's travel (plan.rounded): `own` (fp32, this rank's slice) rounded to bf16
// and all-gathered, and the head's pieces broadcast over `head` (broadcast_head). Both buffers are
// written whole before anything reads them (no zero fill). Collective over `dp`.
RoundedGather start_rounded_gather(const BucketGatherPlan& plan, const Tensor& own, const Tensor& head,
                                   Communicator& dp, Backend& backend);

}  // namespace tripod
