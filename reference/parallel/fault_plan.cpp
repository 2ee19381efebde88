#include "parallel/fault_plan.h"

#include <algorithm>

#include "core/error.h"

namespace tripod {
namespace {

struct FaultInfo {
  Fault fault;
  const char* name;
  const char* description;
};

const std::vector<FaultInfo>& catalogue() {
  static const std::vector<FaultInfo> faults = {
      {Fault::SkipGradReduction, "skip-grad-reduction", "the first gradient bucket's data-parallel reduction is forgotten"},
      {Fault::SkipTiedEmbeddingReduction, "skip-tied-embedding-reduction",
       "a pipeline's two tied-embedding gradients are not summed across stages"},
      {Fault::LocalTokenCount, "local-token-count",
       "the loss is normalised by the data-parallel rank's own valid tokens, not the global count"},
      {Fault::SecondDpAverage, "second-dp-average", "gradients are divided by the data-parallel size once more"},
      {Fault::RowParallelBiasEveryRank, "row-parallel-bias-every-rank",
       "a row-parallel layer adds its bias on every tensor-parallel rank before the sum"},
      {Fault::NormCountsReplicated, "norm-counts-replicated",
       "the gradient norm counts tensors replicated over tensor parallelism on every TP rank"},
      {Fault::NormSkipsDataParallel, "norm-skips-data-parallel",
       "the gradient norm is not summed over data-parallel ranks (each clips by its own slices)"},
      {Fault::SpSkipGradAllReduce, "sp-skip-grad-allreduce",
       "sequence parallelism's partial LayerNorm and bias gradients are not summed over TP"},
      {Fault::PaddedVocabSoftmax, "padded-vocab-softmax",
       "the vocab-parallel softmax includes the padding columns of a vocabulary that does not divide by TP"},
      {Fault::MaxToSumShift, "max-to-sum-shift",
       "the vocab-parallel logsumexp shift (the row maximum) is all-reduced with SUM instead of MAX"},
      {Fault::StaleZero3Params, "stale-zero3-params",
       "ZeRO-3 reuses the parameters it gathered first instead of gathering the updated shards"},
      {Fault::UseAfterRelease, "use-after-release",
       "ZeRO-3 releases a bucket's gathered parameters before the model has read them"},
      {Fault::StaleZero12Params, "stale-zero12-params",
       "ZeRO-1/2 skip the parameter all-gather after the step: each rank keeps its old copy of the others' slices"},
      {Fault::RoundedMasters, "rounded-masters",
       "ZeRO-1/2's bf16 parameter gathers (bf16-mixed) widen into the rank's own slice too: its fp32 master "
       "weights become their bf16 rounding"},
      {Fault::UnwaitedParamGather, "unwaited-param-gather",
       "ZeRO-1/2 with overlapped parameter gathers (-opg): the forward reads a bucket's parameters without "
       "waiting for its all-gather, which lands only when waited for (the step waits for them all before it "
       "writes)"},
      {Fault::PipelineSlotMixup, "pipeline-slot-mixup",
       "a pipeline stage's backward reads the activations of another micro-batch in flight (stages before the loss)"},
      {Fault::HangOneRank, "hang-one-rank",
       "data-parallel rank 1 skips the loss reduction, so the others wait forever (the timeout's test)"},
      {Fault::FailOneRank, "fail-one-rank",
       "data-parallel rank 1 fails a check in its loss step that the others pass, so they wait for it in the "
       "loss reduction (the lone failure's test)"},
  };
  return faults;
}

const FaultInfo& info(Fault fault) {
  for (const FaultInfo& f : catalogue())
    if (f.fault == fault) return f;
  fail("unknown fault");
}

}  // namespace

const std::vector<Fault>& all_faults() {
  static const std::vector<Fault> faults = [] {
    std::vector<Fault> out;
    for (const FaultInfo& f : catalogue()) out.push_back(f.fault);
    return out;
  }();
  return faults;
}

std::string fault_name(Fault fault) { return info(fault).name; }
std::string fault_description(Fault fault) { return info(fault).description; }

Fault parse_fault(const std::string& name) {
  std::string known;
  for (const FaultInfo& f : catalogue()) {
    if (f.name == name) return f.fault;
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  fail("unknown fault '", name, "' (known: ", known, "; tripod conform --list-faults describes them)");
}

bool FaultPlan::has(Fault fault) const { return std::find(active_.begin(), active_.end(), fault) != active_.end(); }

}  // namespace tripod
