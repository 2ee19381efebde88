// ZeRO-3's parameters: each rank keeps its shard; a bucket's parameters are all-gathered when the
// model acquires one of its groups and dropped when the last user releases it (NaN-filled first
// when the fault plan poisons released buffers, so that a read after release cannot pass).
//
// Prefetch: the order in which a pass acquires buckets is the model's program order, the same on
// every step and every DP rank. The first forward and the first backward are recorded as traces;
// in later passes, acquiring trace event i starts the non-blocking gathers of the next `prefetch`
// buckets of the trace, so that they travel while bucket i computes. At most 1 + prefetch buckets
// (2 + prefetch with a tied head, which holds the embedding's bucket too) are gathered or in
// flight at once. A released bucket that the trace's next event acquires again (the next block of
// a bucket holding several) is kept instead of being dropped and gathered anew, prefetch or not. Gathers copy values, so prefetching changes no result bit. A
// pass's leftovers (prefetched, never acquired) are dropped when the next pass begins, so no pass
// reads a gather made before the shards last changed (an update, a checkpoint load); drop_all()
// also empties everything before the update and initialisation.
//
// bf16 operand gathers (under the bf16-operand policy, fp32 shards): a bucket travels as
// parallel/bucket_gather_plan.h plans, the plan ZeRO-1/2 follow after their step: each rank rounds
// its slice to bf16 (nearest even) and the bucket is all-gathered as bf16, while its exact head
// [0, exact) - LayerNorms, biases, embeddings - is broadcast in fp32 from the ranks whose slices
// hold it into a buffer of its own. view() gives the operand-only weights
// as bf16 tensors, which the model's linear layers take as their prepared GEMM operands
// (model/linear.h): the bf16 values the model would have rounded an fp32 gather to, so the same
// bits, for about half the bytes and half the gathered memory, and no rounding of the weights in
// the model. A bucket with no operand-only tensor, or whose head is half of it or more, travels in
// fp32 alone.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/bucket_gather_plan.h"
#include "parallel/fault_plan.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_policy.h"

namespace tripod {

enum class PassKind { Forward, Backward };

class ParamGatherer {
 public:
  // param_shard (this rank's slices of every bucket) must outlive the gatherer. prefetch: buckets
  // gathered ahead of use (0: each is gathered when it is acquired).
  ParamGatherer(const ShardLayout& layout, const std::vector<ParamSpec>& specs, Communicator& dp, Backend& backend,
                DType dtype, Tensor param_shard, TransientMemory& memory, const FaultPlan& faults, int prefetch,
                bool bf16_operand_gathers = false);
  ~ParamGatherer();

  void begin_pass(PassKind kind);                // the model's next pass (enables the traces)
  void acquire(int group);                       // gathers the group's bucket on its first user
  void release(int group);                       // frees it after its last
  // The tensor in its gathered bucket, while acquired (bf16 for a rounded bucket's operand-only ones).
  const Tensor& view(std::size_t tensor) const;
  void drop_all();                               // no gathered or in-flight bucket remains
  // The whole bucket, gathered into a fresh buffer (for reports and checkpoints; no bookkeeping).
  Tensor gather_bucket(int bucket) const;
  int64_t prefetched() const { return prefetch_hits_; }  // acquisitions served by a prefetch, so far
  std::size_t peak_bytes() const { return own_.peak; }    // of gathered buckets held at once, so far
  // Bytes the model's gathers have written on this rank so far (their whole outputs: what travels
  // is (dp - 1) / dp of it); gather_bucket's are not counted.
  int64_t received_bytes() const { return received_bytes_; }

 private:
  struct Trace {
    std::vector<int> events;  // bucket of every first-user acquisition, in order
    bool recorded = false;    // complete: replayed from now on
    bool valid = true;        // a pass that strayed from it turns prefetching off for this kind
  };
  struct InFlight;
  // The bucket's plan (see above): bf16 with its exact head in fp32, or fp32.
  const BucketGatherPlan& plan_of(int bucket) const;
  void start_gather(int bucket);   // non-blocking, into a fresh buffer
  void finish_gather(int bucket);  // waits for an in-flight gather
  void prefetch_after(std::size_t event);
  void drop(int bucket);           // poison (if asked) and free
  void drop_unused();              // every bucket held without a user (prefetched or kept)
  bool held(int bucket) const {
    const auto b = static_cast<std::size_t>(bucket);
    return gathered_[b].defined() || operands_[b].defined() || in_flight_[b] != nullptr;
  }

  const ShardLayout& layout_;
  const std::vector<ParamSpec>& specs_;
  Communicator& dp_;
  Backend& backend_;
  DType dtype_;
  Tensor param_shard_;
  TransientMemory& memory_;
  const FaultPlan& faults_;
  const int prefetch_;
  std::vector<BucketGatherPlan> plans_;  // per bucket: fixed by the layout, made once
  std::vector<Tensor> gathered_;  // per bucket, while gathered (in use, kept or prefetched); a rounded
                                  // bucket's exact head [exact] (undefined where it has none)
  std::vector<Tensor> operands_;  // per bucket, while a rounded bucket is gathered: bf16 [size]
  std::vector<std::unique_ptr<InFlight>> in_flight_;  // per bucket, a gather not yet waited for
  std::vector<int> users_;        // per bucket
  std::vector<Tensor> views_;     // per tensor
  std::vector<Tensor> stale_;     // per bucket: the first gathered copy (the stale-parameters fault)
  Trace traces_[2];               // forward, backward
  Trace* trace_ = nullptr;        // the current pass's (none outside a pass)
  std::size_t cursor_ = 0;        // events of the current pass so far
  int64_t prefetch_hits_ = 0;
  int64_t received_bytes_ = 0;
  TransientMemory own_;  // the gathered buckets alone (memory_ also counts gradient buckets)
  void account(std::ptrdiff_t bytes) {
    memory_.add(bytes);
    own_.add(bytes);
  }
};

}  // namespace tripod
