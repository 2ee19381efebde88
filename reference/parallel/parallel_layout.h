// ParallelLayout: how a training run is spread over ranks - the one home of tensor, pipeline and
// data parallelism, ZeRO, micro-batching, the pipeline schedule, sequence parallelism, gradient
// buckets and the grid's rank order. It is named (conform's names: "tp2-pp2-dp2-z1-mb4-1f1b",
// "-sp" for sequence parallelism, "-v2" for virtual stages), parsed, validated once against a model
// and a world size (every rule, before any communication, the same message on every rank) and
// enumerated for conformance. The CLI, conform, the benchmarks and the trainer all take it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"

namespace tripod {

// The shape of one optimizer step that a layout must divide.
struct StepShape {
  int64_t batch_size = 1;                // sequences in the global batch
  int64_t seq_len = 1;                   // tokens per sequence
  std::vector<int64_t> pipeline_split;   // layers per pipeline chunk (empty: even)
};

struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1;
  int zero = 0;             // ZeRO stage 0-3 (parallel/zero_policy.h)
  int micro_batches = 1;    // per optimizer step, on every DP rank
  ScheduleKind schedule = ScheduleKind::OneFOneB;  // with pp > 1
  int virtual_stages = 1;   // model chunks per pipeline rank (interleaved)
  bool sequence_parallel = false;
  Recompute recompute = Recompute::None;  // mirrors train.recompute: "-rsel", "-rfull" in the name
  int zero3_prefetch = 1;   // ZeRO-3 buckets gathered ahead of use: "-pfN" in the name unless 1
  // ZeRO 1-3 under bf16-mixed gather the GEMM weights as bf16 (the same bits, half the bytes;
  // parallel/param_gatherer.h, parallel/updated_param_gather.h); this gathers every parameter in
  // fp32 instead: "-gfp32".
  bool fp32_param_gathers = false;
  // ZeRO-1/2: the all-gathers of the updated parameters stay in flight after the step until the
  // next forward reaches each bucket (Megatron's --overlap-param-gather): "-opg".
  bool overlap_param_gather = false;
  int receives_ahead = 2;   // pipeline receives posted ahead of their action: "-raN" unless 2
  // Each TP rank's vocabulary rows (wte, LM head, logit columns) padded up to a multiple of this
  // (Megatron's --make-vocab-size-divisible-by): "-padN" unless 1. Storage only: the padding rows
  // are never selected nor in a softmax, and checkpoints hold the logical [V, C].
  int vocab_multiple = 1;
  int64_t bucket_bytes = int64_t{4} << 20;  // gradient bucket size
  std::string grid_order = "tp-dp-pp";      // rank order of the grid axes, fastest first

  int ranks() const { return tp * pp * dp; }
  bool pipelined() const { return pp > 1; }
  // Whether parameters are stored as TP shards (tp_shard.h): with tensor parallelism, and with a
  // padded vocabulary even on one TP rank.
  bool sharded_parameters() const { return tp > 1 || vocab_multiple > 1; }
  GridShape grid() const { return {tp, pp, dp}; }
  // "tp1-pp2-dp2-z1-mb4-1f1b" (no schedule without a pipeline): parse() reads it back.
  std::string name() const;
  // "tp=2 pp=2 dp=2, ZeRO-1, sequence parallel, 1f1b m=4 v=2": for people.
  std::string describe() const;
  static ParallelLayout parse(const std::string& name);  // throws naming the bad part
  // --bucket-mb as bytes; NaN, infinities, sizes <= 0 and above 1 TiB are Errors naming the option.
  static int64_t bucket_bytes_from_mib(double mib);

  // Every rule a layout must satisfy for this model, step and world; throws the first broken one.
  void validate(const ModelConfig& model, const StepShape& step, int world_size) const;
  // The rules that need no world (conform's replicas run on a part of it).
  void validate(const ModelConfig& model, const StepShape& step) const;
  int64_t local_batch(const StepShape& step) const { return step.batch_size / dp; }
  int64_t micro_batch(const StepShape& step) const { return local_batch(step) / micro_batches; }
};

// Every layout the implemented parallelism supports on `world_size` ranks for this model and step
// (TP dividing the heads, PP up to the layers, every DP that divides the batch, ZeRO 0-3,
// micro-batches 1 and 2 without PP and p and 2p with it, every schedule, SP on and off; each ZeRO-1
// layout again with selective and each ZeRO-3 layout again with full activation recomputation, and
// the ZeRO-2 layouts of the first micro-batch count without SP again with a padded vocabulary, and
// those with DP > 1 of the last count without SP again with overlapped parameter gathers).
std::vector<ParallelLayout> enumerate_layouts(int world_size, const ModelConfig& model, const StepShape& step);

}  // namespace tripod
