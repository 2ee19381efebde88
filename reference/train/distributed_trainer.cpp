#include "train/distributed_trainer.h"

#include <chrono>
#include <cmath>

namespace tripod {
namespace {

bool tensor_parallel(const DataParallelSettings& s) { return s.tp != nullptr && s.tp->size() > 1; }

std::unique_ptr<tp::TensorParallelLayers> make_tp_layers(const RunConfig& config, const DataParallelSettings& s) {
  check(!s.sequence_parallel || tensor_parallel(s), "sequence parallelism needs tensor parallelism (tp > 1)");
  return tensor_parallel(s) ? std::make_unique<tp::TensorParallelLayers>(config.model, *s.tp, s.sequence_parallel)
                            : nullptr;
}

// This TP rank's shards as parameter specs (local shapes, same names, init and decay).
TensorParallelShards make_tp_shards(const RunConfig& config, const DataParallelSettings& s) {
  TensorParallelShards t;
  if (!tensor_parallel(s)) return t;
  t.comm = s.tp;
  t.logical = gpt_param_specs(config.model);
  t.shards = tp::tp_shards(config.model, s.tp->size(), s.tp->rank());
  return t;
}

std::vector<ParamSpec> local_specs(const std::vector<ParamSpec>& specs, const TensorParallelShards& t) {
  if (t.shards.empty()) return specs;
  std::vector<ParamSpec> local = t.logical;
  for (std::size_t i = 0; i < local.size(); ++i) local[i].shape = t.shards[i].local;
  return local;
}

}  // namespace

DistributedTrainer::DistributedTrainer(const RunConfig& config, Backend& backend, Communicator& dp,
                                       DataParallelSettings settings)
    : config_(config),
      backend_(backend),
      dp_(dp),
      tp_layers_(make_tp_layers(config, settings)),
      tp_shards_(make_tp_shards(config, settings)),
      model_(config.model, backend, config.train.dtype, tp_layers_.get()),
      engine_(local_specs(model_.specs(), tp_shards_), config.model.n_layer, settings.zero_stage, settings.bucket_bytes,
              dp, backend, config.train.dtype, config.adamw, &tp_shards_),
      sequence_parallel_(settings.sequence_parallel) {
  engine_.skip_reduction_of_bucket(settings.skip_reduction_of_bucket);
  const int64_t B = config_.train.batch_size, n = dp_.size(), micro = config_.train.micro_batches;
  check(B % n == 0, "train.batch_size (", B, ") does not divide among ", n, " data-parallel ranks");
  check((B / n) % micro == 0, "the per-rank batch of ", B / n, " sequences (train.batch_size / dp) does not split into ",
        micro, " micro-batches (train.micro_batches)");
}

int64_t DistributedTrainer::local_batch() const { return config_.train.batch_size / dp_.size(); }

void DistributedTrainer::initialise() {
  engine_.initialise(config_.train.seed);
  step_ = 0;
}

LossSum DistributedTrainer::forward_backward(const data::Batch& batch, bool backward) {
  const int64_t T = batch.seq_len, local = local_batch(), micro = config_.train.micro_batches;
  check(batch.batch == config_.train.batch_size, "expected a global batch of ", config_.train.batch_size,
        " sequences, got ", batch.batch);
  int64_t n_valid = 0;  // of the whole global batch: every rank sees it, so no communication needed
  for (int32_t t : batch.targets) n_valid += t >= 0;
  check(n_valid > 0, "step ", step_, ": the batch has no valid (non-ignored) targets");
  const double grad_scale = 1.0 / static_cast<double>(n_valid);

  if (backward) engine_.zero_grads();
  LossSum mine;
  const int64_t per_micro = local / micro;
  for (int64_t k = 0; k < micro; ++k) {
    const int64_t offset = (dp_.rank() * local + k * per_micro) * T;
    LossSum part = model_.forward(engine_, batch.tokens.data() + offset, batch.targets.data() + offset, per_micro, T);
    mine.sum += part.sum;
    if (backward) {
      engine_.begin_backward(k == micro - 1);
      model_.backward(engine_, grad_scale);
      engine_.finish_backward();
    }
  }
  // Sequence parallelism leaves the LayerNorm and row-parallel bias gradients partial per TP rank.
  if (backward && sequence_parallel_) engine_.all_reduce_partial_tp_grads();
  Tensor total = backend_.alloc({1}, DType::F64);
  total.data<double>()[0] = mine.sum;
  dp_.all_reduce(total, total, ReduceOp::Sum);
  return {total.data<double>()[0], n_valid};
}

StepResult DistributedTrainer::train_step(const data::Batch& batch) {
  const auto start = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step_;
  r.tokens = batch.batch * batch.seq_len;
  const LossSum loss = forward_backward(batch, true);
  r.loss = loss.sum / static_cast<double>(loss.n_valid);
  // The loss and the norm are all-reduced, so every rank takes the same decision here.
  check(std::isfinite(r.loss), "step ", step_, ": the loss is ", r.loss,
        " (training diverged); parameters were not updated with this step's gradients");
  r.grad_norm = engine_.grad_norm();
  check(std::isfinite(r.grad_norm), "step ", step_, ": the gradient norm is ", r.grad_norm,
        " (training diverged); parameters were not updated with this step's gradients");
  r.lr = config_.schedule.at(step_);
  engine_.optimizer_step(r.lr, step_ + 1, clip_coefficient(r.grad_norm, config_.grad_clip));
  ++step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

double DistributedTrainer::eval_loss(const data::Batch& batch) {
  const LossSum loss = forward_backward(batch, false);
  return loss.sum / static_cast<double>(loss.n_valid);
}

MemoryReport DistributedTrainer::memory() const {
  const ZeroMemory z = engine_.memory();
  return {z.params, z.grads, z.optimizer, model_.activation_bytes(), z.peak_transient};
}

void DistributedTrainer::save(const std::string& dir) {
  fail("cannot save ", dir, ": checkpoints of data-parallel / ZeRO runs need the sharded checkpoint format, which ",
       "is not implemented yet (single-process runs checkpoint with --save)");
}

void DistributedTrainer::resume(const std::string& dir) {
  fail("cannot resume from ", dir, ": data-parallel / ZeRO runs cannot load checkpoints until the sharded ",
       "checkpoint format is implemented");
}

}  // namespace tripod
