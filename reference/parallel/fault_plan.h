// Deliberate bugs, for proving that the conformance suite can fail (`tripod conform
// --inject-fault NAME`, `--list-faults`): each a realistic mistake in data, tensor or pipeline
// parallelism, ZeRO, the loss or the norm. A FaultPlan says which are active; the one place in the
// code that would have each bug asks the plan there. Engines carry no fault flags of their own, and
// a run without a plan (the default) has none.
//
// A plan also says whether released buffers are poisoned (conform runs): ZeRO-3's gathered
// parameters are NaN-filled when their last user releases them, so a read after release fails
// loudly instead of reading memory that a view happens to keep alive.
#pragma once
#include <string>
#include <vector>

namespace tripod {

enum class Fault {
  SkipGradReduction,           // the first gradient bucket's DP reduction is skipped (used unreduced)
  SkipTiedEmbeddingReduction,  // a pipeline's two tied-wte gradients are not summed across stages
  LocalTokenCount,             // the loss is normalised by this DP rank's valid tokens, not the global count
  SecondDpAverage,             // gradients are divided by the DP size once more (an extra 1/dp)
  RowParallelBiasEveryRank,    // a row-parallel bias is added on every TP rank before the sum, not once after
  NormCountsReplicated,        // the gradient norm counts TP-replicated tensors on every TP rank
  NormSkipsDataParallel,       // the gradient norm is not summed over DP (each rank clips by its slices)
  SpSkipGradAllReduce,         // sequence parallelism's partial LayerNorm/bias gradients are not summed over TP
  PaddedVocabSoftmax,          // the vocab-parallel softmax sums over the padding columns too
  MaxToSumShift,               // the vocab-parallel logsumexp shift is all-reduced with SUM instead of MAX
  StaleZero3Params,            // ZeRO-3 keeps the buckets it gathered first and never gathers updates
  UseAfterRelease,             // ZeRO-3 releases a bucket's gathered parameters before they are read
  StaleZero12Params,           // ZeRO-1/2 skip the all-gather after the step: others' slices stay stale
  RoundedMasters,              // ZeRO-1/2's bf16 gathers widen into this rank's own slice: masters rounded
  UnwaitedParamGather,         // -opg: the forward reads a bucket before its overlapped gather is waited for
  PipelineSlotMixup,           // a pipeline backward reads another in-flight micro-batch's activations
  HangOneRank,                 // DP rank 1 skips the loss reduction: the others wait forever (timeout test)
  FailOneRank                  // DP rank 1 fails a check the others pass: they wait for it (lone-failure test)
};

std::string fault_name(Fault fault);           // "skip-grad-reduction", ...
std::string fault_description(Fault fault);    // one line: what the bug is
Fault parse_fault(const std::string& name);    // throws listing the known names
const std::vector<Fault>& all_faults();        // the catalogue, in the order above

class FaultPlan {
 public:
  FaultPlan() = default;  // no faults, nothing poisoned
  explicit FaultPlan(std::vector<Fault> active, bool poison_released = false)
      : active_(std::move(active)), poison_released_(poison_released) {}
  bool has(Fault fault) const;
  bool empty() const { return active_.empty(); }
  const std::vector<Fault>& active() const { return active_; }
  bool poison_released() const { return poison_released_; }

 private:
  std::vector<Fault> active_;
  bool poison_released_ = false;
};

}  // namespace tripod
