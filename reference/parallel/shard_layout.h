// Where every parameter, gradient and optimizer element lives under data parallelism and ZeRO.
//
// Parameter groups (embeddings, each block, the head; see model/param_access.h) are packed into
// communication buckets in the order backward finishes them (head first, embeddings last), each
// bucket at least `bucket_elements` long unless it is one group, or exactly one group when
// `one_group_per_bucket` (ZeRO-3 gathers layer by layer). In the flat buffer a bucket's tensors
// are contiguous and the bucket is zero-padded to n equal, 64-byte aligned slices, so every bucket
// reduce-scatters and all-gathers in place in n equal slices, whatever the tensor sizes:
//
//   flat:  | bucket (group 0)  pad | bucket (groups 1-2)     pad | bucket (group 3) pad |
//   rank r owns slice r of every bucket; its shard is those slices concatenated (shard_elements).
//
// Inside a bucket the tensors lie in spec order, except that those the model reads only as GEMM
// operands (`operand_only`: the linear layers' weights, model/param_spec.h) come after all the
// others: a bucket is [exact tensors | operand-only tensors | pad], so that ZeRO-3 under the
// bf16-operand policy can gather its first `exact` elements in fp32 and the rest as bf16
// (parallel/param_gatherer.h), with no packing. Every stage and precision uses this placement.
//
// A tensor may straddle slices; `segments(rank)` lists the pieces of the rank's slices that lie in
// each tensor, which is what the sharded optimizer iterates over (weight decay is per tensor).
#pragma once
#include <cstdint>
#include <vector>

#include "model/param_spec.h"

namespace tripod {

struct Bucket {
  int64_t start = 0;        // first element in the padded flat buffer
  int64_t size = 0;         // padded size, a multiple of the DP size
  int64_t used = 0;         // elements that belong to tensors (the rest is padding)
  std::vector<int> groups;  // parameter groups it holds
  std::vector<std::size_t> tensors;  // the specs it holds (indices), in spec order
  // Elements [0, exact) hold the tensors that are not operand-only (`used` where none is).
  int64_t exact = 0;
  // One past the last tensor's last element: `used` plus the gaps that align the operand-only
  // tensors (so [exact, end) holds exactly those tensors and their gaps).
  int64_t end = 0;
};

class ShardLayout {
 public:
  static constexpr int64_t kAlignElements = 16;  // 64 bytes of fp32

  // own_bucket_groups: groups that share their bucket with no other (a pipeline's tied embedding,
  // whose reduction waits for the other stage), each bucket padded to at least
  // own_bucket_min_elements (so two stages' buckets of one tied tensor can be made the same size).
  // operand_only: per tensor, or empty for none (see above).
  ShardLayout(const std::vector<ParamSpec>& specs, const std::vector<int>& groups, int dp, int64_t bucket_elements,
              bool one_group_per_bucket, const std::vector<int>& own_bucket_groups = {},
              int64_t own_bucket_min_elements = 0, const std::vector<bool>& operand_only = {});

  int dp() const { return dp_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }  // per tensor, in the padded buffer
  int64_t total() const { return total_; }                          // padded flat size
  const std::vector<Bucket>& buckets() const { return buckets_; }   // in the order backward finishes them
  bool holds_group(int group) const {
    return group >= 0 && static_cast<std::size_t>(group) < bucket_of_group_.size() &&
           bucket_of_group_[static_cast<std::size_t>(group)] >= 0;
  }
  int bucket_of_group(int group) const;  // throws for a group this layout does not hold
  int64_t shard_elements() const { return total_ / dp_; }
  // Where bucket b's slice sits in a rank's shard (the same for every rank).
  int64_t shard_offset(int bucket) const { return shard_offsets_[static_cast<std::size_t>(bucket)]; }
  // First flat element of `rank`'s slice of bucket b.
  int64_t slice_start(int bucket, int rank) const;

  struct Segment {
    std::size_t tensor;  // index into the specs
    int64_t flat;        // offset in the padded flat buffer
    int64_t local;       // offset in the rank's shard
    int64_t length;
    int bucket;
  };
  std::vector<Segment> segments(int rank) const;

 private:
  int dp_;
  std::vector<int64_t> offsets_, sizes_;
  int64_t total_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_group_;
  std::vector<int64_t> shard_offsets_;
};

}  // namespace tripod
