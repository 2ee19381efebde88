// The data-parallel reduction of gradients in buckets (parallel/shard_layout.h). A bucket's
// reduction is launched as soon as backward reports all its parameter groups ready, so it overlaps
// the rest of backward; every hook also test()s the reductions in flight, because Open MPI advances
// non-blocking collectives only inside MPI calls. Per the ZeRO policy:
//   all-reduce (stage 0)      the bucket of the full gradients, in place
//   reduce-scatter (1)        the bucket of the full gradients into this rank's gradient shard
//   reduce-scatter (2-3)      a bucket-sized buffer that exists only while the bucket is in use:
//                             in place into this rank's block, then added into the gradient shard
// Deferred buckets (a pipeline's tied embedding, summed across stages first) are held back until
// reduce_deferred().
//
// Split buckets (a tied embedding with its LM head in one span) are reduced in two parts, because
// the whole gradient is final only after backward's last computation, with nothing left to hide its
// reduction behind. The model reports the head's part final at the start of backward
// (ready_except_rows): the bucket is launched then, and the embedding lookup's additions go to a
// zeroed buffer of the bucket's size instead. At ready() only the rows some DP rank touched (the
// union of the batches' tokens, gathered meanwhile) are packed and all-reduced, and apart from them
// the bucket's other tensors; once the first part has arrived, these are added to it. Every rank
// does the same, in the same order, whatever the timing, so results stay deterministic; they
// differ from the unsplit reduction in rounding only (the two parts are summed over DP separately).
// An untied embedding's gradient is the lookup's alone, so where no earlier micro-batch has written
// its bucket (one micro-batch per step, or ZeRO-2/3, which reduce each one) the first part is zero
// and is not sent: only the union's rows and wpe are reduced, a fraction of the table.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/fault_plan.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_policy.h"

namespace tripod {

class GradientBuckets {
 public:
  // full_grads: the padded full gradients (stages 0-1, else undefined); grad_shard: this rank's
  // shard of the reduced gradients (stages 1-3, else undefined). The layout, specs, memory and
  // fault plan must outlive this object.
  GradientBuckets(const ShardLayout& layout, const std::vector<ParamSpec>& specs, const ZeroPolicy& policy,
                  Communicator& dp, Backend& backend, DType dtype, Tensor full_grads, Tensor grad_shard,
                  TransientMemory& memory, const FaultPlan& faults);
  ~GradientBuckets();

  void defer(int bucket) { deferred_[static_cast<std::size_t>(bucket)] = true; }
  // The bucket (which must hold a single group) may be reduced in two parts.
  void allow_split(int bucket);
  // Whether ready_except_rows(group, ...) would split this backward's reduction: the group's bucket
  // allows it, this backward reduces, and there is more than one DP rank.
  bool splits(int group) const;
  // The group's gradients are final except for rows `rows` (local row ids of tensor `sparse`) and
  // the bucket's other tensors: launches the bucket, starts gathering every DP rank's rows (each
  // padded to most_rows, which must be the same on every rank) and redirects later writes (see
  // above). Only where splits(group). `first_part_zero`: the bucket holds nothing yet (an untied
  // embedding, written only by the lookup, before it): its first part is not sent at all, and the
  // rows and other tensors are the whole reduction.
  void ready_except_rows(int group, std::size_t sparse, const std::vector<int64_t>& rows, int64_t most_rows,
                         bool first_part_zero = false);
  // Where the tensor's gradient is written after a split, until its group is ready (null otherwise).
  const Tensor* redirected(std::size_t tensor) const;
  // Elements in the last split's second reduction (0 before any): its rows and other tensors.
  int64_t last_split_elements() const { return last_split_elements_; }
  // Elements in the last split's first part (the bucket; 0 when it was known to be zero).
  int64_t last_split_first_elements() const { return last_split_first_elements_; }
  // Before each micro-batch's backward; reductions are launched only when `reduce` is true (or the
  // policy reduces every micro-batch).
  void begin_backward(bool reduce);
  // Stages 2-3: the zeroed bucket buffer that gradients of `group` accumulate in (made on first use).
  void acquire(int group);
  const Tensor& view(std::size_t tensor) const;  // tensor's gradient in its bucket buffer (stages 2-3)
  void ready(int group);   // the group's gradients are final for this backward
  void progress();         // completes whatever MPI has finished
  void finish();           // waits for every reduction of this backward
  void reduce_deferred();  // launches the deferred buckets and waits for them

 private:
  struct Pending;
  struct Split;
  struct Piece {  // a run of a split bucket's second part: where it sits in the bucket and in the packed buffer
    int64_t in_bucket = 0, packed = 0, length = 0;
  };
  // Where this rank's reduced values of a bucket live: target[base + x] for the bucket's elements
  // x in [begin, end) (all of it in the full gradients, this rank's slice in the shard).
  struct HeldWindow {
    Tensor target;
    int64_t base = 0, begin = 0, end = 0;
  };
  HeldWindow held_window(int bucket) const;
  void launch(int bucket);
  void launch_zero(int bucket);  // a bucket known to be zero on every rank: its sum, without sending it
  void launch_rest();  // the second part of the split bucket
  Tensor upload_rows(const std::vector<int64_t>& rows, int64_t begin, int64_t end, int64_t first);
  void complete(Pending& pending);
  void complete_rest(Pending& pending);
  Tensor bucket_of(const Tensor& flat, int bucket) const;

  const ShardLayout& layout_;
  const std::vector<ParamSpec>& specs_;
  ZeroPolicy policy_;
  Communicator& dp_;
  Backend& backend_;
  DType dtype_;
  Tensor full_grads_, grad_shard_;
  TransientMemory& memory_;
  const FaultPlan& faults_;
  std::vector<Tensor> buffers_;    // per bucket, while in use (stages 2-3)
  std::vector<Tensor> views_;      // per tensor, into buffers_
  std::vector<int> groups_ready_;  // per bucket, this backward
  std::vector<bool> deferred_, splittable_;
  std::unique_ptr<Split> split_;  // between ready_except_rows and ready of the split group
  int64_t last_split_elements_ = 0, last_split_first_elements_ = 0;
  std::vector<std::unique_ptr<Pending>> pending_;
  bool reduce_ = false;
};

}  // namespace tripod
