// The optimizer step under data, tensor and pipeline parallelism and ZeRO 0-3.
//
// Data: each DP rank takes its fixed slice of the global batch (rows [r*B/n, (r+1)*B/n)), split
// into m micro-batches; the ZeroEngine of each model chunk reduces gradients in buckets overlapped
// with backward. Pipeline: the model is cut into chunks (parallel/pipeline_split.h) run by a
// schedule (AFAB, 1F1B, interleaved) whose activations and gradients travel between stages; with
// pp = 1 the schedule is 1F1B on one stage, i.e. forward then backward of each micro-batch in turn.
// The loss is the sum over valid targets of the whole global batch divided by their global count
// (not an average of per-rank means), then clipping by the global norm and AdamW on whatever this
// rank owns.
//
// Tied embeddings under pipelining: the first stage holds wte for the embedding, the last stage a
// copy for the LM head. Their gradient buckets (of equal size on both stages) are held back during
// backward; after the flush the two local gradients are summed over the embedding group, then
// reduced over DP as usual, so both copies take the same update, bit for bit (one logical weight).
// The norm counts the first stage's copy only.
#pragma once
#include <memory>

#include "comm/communicator.h"
#include "data/batch_loader.h"
#include "model/gpt.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_split.h"
#include "parallel/tp_layers.h"
#include "parallel/zero_engine.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace tripod {

struct PipelineSettings {
  Communicator* pp = nullptr;         // the pipeline group of this rank (nullptr or size 1: none)
  Communicator* embedding = nullptr;  // ProcessGrid::embedding(): first and last stage (tied wte)
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int virtual_stages = 1;
  std::vector<int64_t> layers_per_chunk;  // empty: train.pipeline_split, else even
  // Fault injection (conformance self-test): the tied wte gradients are not summed across stages.
  bool skip_tied_embedding_reduction = false;
};

struct DataParallelSettings {
  int zero_stage = 0;
  int64_t bucket_bytes = 4 << 20;  // gradient bucket size
  // Fault injection for proving that conformance checks can fail: this bucket's gradients are
  // used unreduced (as if its reduction were forgotten). -1: none.
  int skip_reduction_of_bucket = -1;
  // Tensor parallelism: the TP group of this rank (nullptr or size 1: none). Every rank of a DP
  // group holds the same TP rank's shards.
  Communicator* tp = nullptr;
  bool sequence_parallel = false;  // with tp: split the residual stream along the sequence
  PipelineSettings pipeline = {};
};

class DistributedTrainer final : public TrainingEngine {
 public:
  DistributedTrainer(const RunConfig& config, Backend& backend, Communicator& dp, DataParallelSettings settings);
  ~DistributedTrainer() override;

  void initialise() override;
  StepResult train_step(const data::Batch& global_batch) override;  // every rank passes the same global batch
  double eval_loss(const data::Batch& global_batch) override;
  MemoryReport memory() const override;
  void reserve_activations() override;
  // Sharded checkpoints arrive with a later issue; these throw a clear error naming it.
  void save(const std::string& dir) override;
  void resume(const std::string& dir) override;
  // Every parameter, full and unpadded, in logical order, identical on all ranks (collective).
  std::vector<std::vector<double>> gather_params();

  int64_t step() const override { return step_; }
  const ZeroEngine& engine() const { return *chunks_.front().engine; }  // of this rank's first chunk
  Gpt& model() { return *chunks_.front().model; }
  int64_t local_batch() const;

  // Pipelining: the schedule, the layer split, this rank's chunks, and the timing of every action
  // of the last train_step on this rank.
  const PipelineSchedule& schedule() const { return schedule_; }
  const PipelineSplit& split() const { return split_; }
  ZeroEngine& chunk_engine(int local) { return *chunks_[static_cast<std::size_t>(local)].engine; }
  Gpt& chunk_model(int local) { return *chunks_[static_cast<std::size_t>(local)].model; }
  const std::vector<ActionTiming>& last_timings() const { return timings_; }
  Communicator& pipeline() { return *pp_; }
  int max_microbatches_in_flight() const;  // activation slots allocated, most over this rank's chunks

 private:
  struct Chunk {
    int index = 0;
    std::unique_ptr<TensorParallelShards> tp_shards;
    std::unique_ptr<Gpt> model;
    std::unique_ptr<ZeroEngine> engine;
    bool tied_copy = false;  // holds the LM head's copy of a tied wte (last stage, pp > 1)
    bool tied_primary = false;  // holds the embedding's wte, tied to a copy on the last stage
  };
  Chunk& chunk(int index);
  LossSum forward_backward(const data::Batch& global_batch, bool backward);

  RunConfig config_;
  Backend& backend_;
  Communicator& dp_;
  std::unique_ptr<Communicator> own_pp_;  // size-1 group when not pipelining
  Communicator* pp_ = nullptr;
  Communicator* embedding_ = nullptr;
  std::unique_ptr<tp::TensorParallelLayers> tp_layers_;  // null without tensor parallelism
  PipelineSplit split_;
  PipelineSchedule schedule_;
  std::vector<Chunk> chunks_;
  bool sequence_parallel_ = false;
  bool skip_tied_reduction_ = false;
  int64_t step_ = 0;
  std::vector<ActionTiming> timings_;
};

}  // namespace tripod
