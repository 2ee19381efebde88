// The optimizer step under data, tensor and pipeline parallelism and ZeRO 0-3, as a
// ParallelLayout says (parallel/parallel_layout.h).
//
// Data: each DP rank takes its fixed slice of the global batch (rows [r*B/n, (r+1)*B/n)), split
// into m micro-batches; the ZeroEngine of each model chunk reduces gradients in buckets overlapped
// with backward. Pipeline: the model is cut into chunks (parallel/pipeline_split.h) run by a
// schedule (AFAB, 1F1B, interleaved) whose activations and gradients travel between stages; with
// pp = 1 the schedule is 1F1B on one stage, i.e. forward then backward of each micro-batch in turn.
// The loss is the sum over valid targets of the whole global batch divided by their global count
// (not an average of per-rank means), then clipping by the global norm and AdamW on whatever this
// rank owns. Tensor parallelism: the gradients each TP rank holds partially under sequence
// parallelism are summed over TP here, and the norm counts replicated tensors once.
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
#include "parallel/fault_plan.h"
#include "parallel/parallel_layout.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_split.h"
#include "parallel/process_grid.h"
#include "parallel/tp_layers.h"
#include "parallel/zero_engine.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace tripod {

class DistributedTrainer final : public TrainingEngine {
 public:
  // `grid` has the layout's shape; it and the backend must outlive the trainer. The layout is
  // validated here (ProcessGrid has checked the world size).
  DistributedTrainer(const RunConfig& config, Backend& backend, const ProcessGrid& grid, const ParallelLayout& layout,
                     const FaultPlan& faults = FaultPlan());
  ~DistributedTrainer() override;

  void initialise() override;
  using TrainingEngine::train_step;
  // Every rank passes the same global batch.
  StepResult train_step(const data::Batch& global_batch, const StepGate& gate) override;
  double eval_loss(const data::Batch& global_batch) override;
  MemoryReport memory() const override;
  void reserve_activations() override;
  // Each chunk's regions; a TP-replicated tensor is written by TP rank 0, a tied wte by its first
  // stage (the last stage's copy is read, not written), the DP split is the engine's.
  std::vector<StateRegion> state_regions() override;
  // Every parameter, full and unpadded, in logical order, identical on all ranks (collective).
  std::vector<std::vector<double>> gather_params();

  int64_t step() const override { return step_; }
  int64_t updates() const override { return updates_; }
  void set_step(int64_t step, int64_t updates) override {
    step_ = step;
    updates_ = updates;
  }
  const ParallelLayout& layout() const { return layout_; }
  const ZeroEngine& engine() const { return *chunks_.front().engine; }  // of this rank's first chunk
  int64_t param_gathered_bytes() const;  // ZeroEngine::gathered_bytes over this rank's chunks
  Gpt& model() { return *chunks_.front().model; }
  int64_t local_batch() const;

  // Pipelining: the schedule, the layer split, this rank's chunks, and the timing of every action
  // of the last train_step on this rank.
  const PipelineSchedule& schedule() const { return schedule_; }
  const PipelineSplit& split() const { return split_; }
  ZeroEngine& chunk_engine(int local) { return *chunks_[static_cast<std::size_t>(local)].engine; }
  Gpt& chunk_model(int local) { return *chunks_[static_cast<std::size_t>(local)].model; }
  const std::vector<ActionTiming>& last_timings() const { return timings_; }
  Communicator& pipeline() { return pp_; }
  int max_microbatches_in_flight() const;  // activation slots allocated, most over this rank's chunks

 private:
  struct Chunk {
    int index = 0;
    std::unique_ptr<TensorParallelShards> tp_shards;
    std::unique_ptr<Gpt> model;
    std::unique_ptr<ZeroEngine> engine;
    bool tied_copy = false;     // holds the LM head's copy of a tied wte (last stage, pp > 1)
    bool tied_primary = false;  // holds the embedding's wte, tied to a copy on the last stage
    std::size_t wte = 0;        // index of wte in the chunk's specs, when it holds one
  };
  struct StepRun;  // the bookkeeping of one forward(-backward) over the schedule
  Chunk make_chunk(int index, int64_t embedding_bucket);
  Shape local_shape(const ParamSpec& spec) const;  // this TP rank's shard of the tensor
  Chunk& chunk(int index);
  LossSum forward_backward(const data::Batch& global_batch, bool backward);
  void reduce_after_backward();  // tied embeddings across stages, then SP's partial gradients over TP
  Tensor grad_sum_squares();     // over every chunk, TP and PP: fp64 [1] on the device
  std::string nonfinite_grads();

  RunConfig config_;
  Backend& backend_;
  const ProcessGrid& grid_;
  ParallelLayout layout_;
  FaultPlan faults_;  // a copy: the engines refer to it
  Communicator& dp_;
  Communicator& pp_;
  std::unique_ptr<tp::TensorParallelLayers> tp_layers_;  // null without TP or a padded vocabulary
  PipelineSplit split_;
  PipelineSchedule schedule_;
  std::vector<Chunk> chunks_;
  int64_t step_ = 0, updates_ = 0;
  std::vector<ActionTiming> timings_;
  // The pipeline's message buffers of a pass (its pool, freed when the pass ends), the most of
  // any pass so far: part of memory()'s transient, as ZeRO's buckets are.
  std::size_t message_bytes_ = 0;
};

// The configuration a layout runs under: `base` with the layout's micro-batch count and activation
// recomputation (the settings a layout names that the run config carries). Conform and the layout
// benchmark run layouts from one base configuration through it.
RunConfig layout_run_config(const RunConfig& base, const ParallelLayout& layout);

// Whether ZeRO 1-3's parameter gathers carry the GEMM weights as bf16 (ZeRO-3's on use,
// parallel/param_gatherer.h; ZeRO-1/2's after the step, parallel/updated_param_gather.h): under
// bf16-mixed, with more than one DP rank (one rank's gathers are copies, which rounding would only
// slow), unless the layout asks for fp32 gathers (-gfp32).
bool gathers_gemm_weights_as_bf16(const ParallelLayout& layout, const TrainSettings& train);

}  // namespace tripod
