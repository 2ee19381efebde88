// The optimizer step under data parallelism and ZeRO 0-3: each DP rank takes its fixed slice of
// the global batch (rows [r*B/n, (r+1)*B/n)), accumulates gradients over its micro-batches, the
// ZeroEngine reduces them in buckets overlapped with backward, the loss is the sum over valid
// targets of the whole global batch divided by their global count (not an average of per-rank
// means), then clipping by the global norm and AdamW on whatever this rank owns.
#pragma once
#include <memory>

#include "comm/communicator.h"
#include "data/batch_loader.h"
#include "model/gpt.h"
#include "parallel/tp_layers.h"
#include "parallel/zero_engine.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace tripod {

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
};

class DistributedTrainer final : public TrainingEngine {
 public:
  DistributedTrainer(const RunConfig& config, Backend& backend, Communicator& dp, DataParallelSettings settings);

  void initialise() override;
  StepResult train_step(const data::Batch& global_batch) override;  // every rank passes the same global batch
  double eval_loss(const data::Batch& global_batch) override;
  MemoryReport memory() const override;
  void reserve_activations() override {
    model_.reserve(local_batch() / config_.train.micro_batches, config_.train.seq_len);
  }
  // Sharded checkpoints arrive with a later issue; these throw a clear error naming it.
  void save(const std::string& dir) override;
  void resume(const std::string& dir) override;
  // Every parameter, full and unpadded, identical on all ranks (collective).
  std::vector<std::vector<double>> gather_params() { return engine_.gather_params(); }

  int64_t step() const override { return step_; }
  const ZeroEngine& engine() const { return engine_; }
  Gpt& model() { return model_; }
  int64_t local_batch() const;

 private:
  LossSum forward_backward(const data::Batch& global_batch, bool backward);

  RunConfig config_;
  Backend& backend_;
  Communicator& dp_;
  std::unique_ptr<tp::TensorParallelLayers> tp_layers_;  // null without tensor parallelism
  TensorParallelShards tp_shards_;
  Gpt model_;
  ZeroEngine engine_;
  bool sequence_parallel_ = false;
  int64_t step_ = 0;
};

}  // namespace tripod
