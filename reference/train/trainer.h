// One model, its parameters, gradients and optimizer, and the optimizer step on a global batch:
// micro-batches accumulate gradients, the loss is the sum over valid targets divided by the
// batch's count of valid targets, gradients are clipped by global norm, then AdamW updates.
// Data loading, logging and checkpoints live in the training loop (train_loop.h).
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "data/batch_loader.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "train/run_config.h"
#include "train/training_engine.h"

namespace tripod {

class Trainer final : public TrainingEngine {
 public:
  // config.model.vocab_size must be resolved (non-zero).
  Trainer(const RunConfig& config, Backend& backend);

  void initialise() override;  // parameters from (seed, tensor name), optimizer state zero, step 0
  // Forward, backward and update on the global batch of step `step()`; throws on a non-finite loss
  // or gradient norm, naming the step, before the parameters are touched.
  using TrainingEngine::train_step;
  StepResult train_step(const data::Batch& batch, const StepGate& gate) override;
  // Mean loss over valid targets of `batch`, forward only.
  double eval_loss(const data::Batch& batch) override;
  MemoryReport memory() const override;
  void reserve_activations() override {
    model_.reserve(config_.train.batch_size / config_.train.micro_batches, config_.train.seq_len);
  }
  std::vector<StateRegion> state_regions() override;  // every tensor whole

  int64_t step() const override { return step_; }
  int64_t updates() const override { return updates_; }
  void set_step(int64_t step, int64_t updates) override {
    step_ = step;
    updates_ = updates;
  }
  const RunConfig& config() const { return config_; }
  Gpt& model() { return model_; }
  const ParamSet& params() const { return params_; }
  const ParamSet& grads() const { return grads_; }
  AdamW& optimizer() { return optimizer_; }
  Backend& backend() { return backend_; }

 private:
  // Runs forward+backward over the micro-batches of `batch`; returns the loss sum and valid count.
  LossSum accumulate_gradients(const data::Batch& batch);

  RunConfig config_;
  Backend& backend_;
  Gpt model_;
  ParamSet params_, grads_;
  AdamW optimizer_;
  int64_t step_ = 0, updates_ = 0;
};

}  // namespace tripod
