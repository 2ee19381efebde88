// ZeRO-1/2's all-gather after the optimizer step: every rank updated its slice of each bucket in
// its full fp32 parameters (the slice is the master copy of those elements) and gathers the others'
// slices back in place.
//
// Under the bf16-operand policy a bucket travels as parallel/bucket_gather_plan.h plans: as bf16,
// widened back into the other ranks' slices of [exact, end), its exact head [0, exact) broadcast
// in fp32, in place, by the ranks whose slices hold it. A rank's own slice is never
// overwritten, so the masters stay exact; the other slices hold the bf16 values widened, which the
// model rounds to the bf16 it would have rounded the exact values to: the same bits, for about half
// the bytes (Megatron's distributed optimizer gathers its bf16 parameters likewise).
//
// So the full parameters are exact only in this rank's slices and the heads. Whoever needs every
// exact value (reports, golden fingerprints) gathers them anew (ZeroEngine::gather_params);
// checkpoints write each piece from its owner's slice.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/bucket_gather_plan.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_policy.h"

namespace tripod {

// Gathers every bucket of `full_params` (fp32 [layout.total()]) from its ranks' slices, in place, as
// planned. Collective over `dp`: every rank starts the buckets' collectives in bucket order at
// construction; it may wait for them in any order. `round_own_slices`: the rounded-masters fault
// (parallel/fault_plan.h), never otherwise. `land_when_waited`: the unwaited-param-gather fault's,
// never otherwise: an fp32 bucket is gathered into a buffer of its own and copied into place when
// it is waited for, so that a read before the wait sees the old values whatever the communicator's
// progress (in place, a gather that happened to complete early hid the missing wait).
//
// Blocking (overlapped = false): at most two rounded buckets' bf16 buffers exist at once (the next
// travels while one is widened), and the constructor returns with every bucket in place.
// Overlapped (Megatron's --overlap-param-gather): every bucket's gather is in flight when the
// constructor returns, all rounded buffers at once (counted in `memory`), and the caller waits for
// a bucket before its parameters are read (wait_bucket: the next forward, as it reaches them) or
// written, and for all before anything else touches the full parameters.
class UpdatedParamGather {
 public:
  UpdatedParamGather(const ShardLayout& layout, const Tensor& full_params, Communicator& dp, Backend& backend,
                     TransientMemory& memory, bool bf16_operand_gathers, bool overlapped,
                     bool round_own_slices = false, bool land_when_waited = false);
  ~UpdatedParamGather();  // waits for what is still in flight (collectives started must complete)
  UpdatedParamGather(const UpdatedParamGather&) = delete;
  UpdatedParamGather& operator=(const UpdatedParamGather&) = delete;

  void wait_bucket(std::size_t bucket);  // its parameters in place; no-op when already
  void wait_all();
  bool done() const { return in_flight_ == 0; }
  // The bytes the gathers write on this rank (their whole outputs, as ZeRO-3's
  // ParamGatherer::received_bytes counts them), known at construction.
  int64_t received_bytes() const { return received_; }

 private:
  struct InFlight {
    std::unique_ptr<CommRequest> in_place;  // an fp32 bucket, gathered in place
    Tensor landing;                         // or, under land_when_waited, here until waited for
    std::unique_ptr<RoundedGather> rounded;   // a rounded one, widened into place when it arrives
  };
  void finish(std::size_t bucket);

  const ShardLayout& layout_;
  Tensor full_params_;
  Backend& backend_;
  TransientMemory& memory_;
  bool round_own_slices_;
  int rank_;
  std::vector<InFlight> buckets_;
  std::size_t in_flight_ = 0;
  int64_t received_ = 0;
};

}  // namespace tripod
