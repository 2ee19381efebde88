#include "train/trainer.h"

#include <chrono>
#include <cmath>


namespace tripod {

Trainer::Trainer(const RunConfig& config, Backend& backend)
    : config_(config),
      backend_(backend),
      model_(config.model, backend, config.train.dtype, nullptr, StageSpan{}, config.train.recompute),
      params_(model_.specs(), backend, config.train.dtype),
      grads_(model_.specs(), backend, config.train.dtype),
      optimizer_(model_.specs(), backend, config.train.dtype, config.adamw) {
  apply_precision_policy(config.train, backend_);
}

void Trainer::initialise() {
  initialise_params(params_, backend_, config_.train.seed);
  backend_.fill(optimizer_.m().flat(), 0.0);
  backend_.fill(optimizer_.v().flat(), 0.0);
  step_ = updates_ = 0;
}

LossSum Trainer::accumulate_gradients(const data::Batch& batch) {
  const int64_t T = batch.seq_len, micro = config_.train.micro_batches;
  check(batch.batch % micro == 0, "batch of ", batch.batch, " sequences does not split into ", micro,
        " micro-batches");
  const int64_t per_micro = batch.batch / micro;
  // The loss is normalised by the valid targets of the whole batch, known before any backward.
  int64_t n_valid = 0;
  for (int32_t t : batch.targets) n_valid += t >= 0;
  check(n_valid > 0, "step ", step_ + 1, ": the batch has no valid (non-ignored) targets");
  const double grad_scale = 1.0 / static_cast<double>(n_valid);

  backend_.fill(grads_.flat(), 0.0);
  LossSum total{alloc_scalar(backend_), 0};  // summed on the device, in micro-batch order
  for (int64_t k = 0; k < micro; ++k) {
    const int64_t offset = k * per_micro * T;
    LossSum part =
        model_.forward(params_, batch.tokens.data() + offset, batch.targets.data() + offset, per_micro, T, grad_scale);
    backend_.add_inplace(total.sum, part.sum);  // before the next forward overwrites the slot's sum
    total.n_valid += part.n_valid;
    model_.backward(params_, grads_, grad_scale);
  }
  return total;
}

StepResult Trainer::train_step(const data::Batch& batch, const StepGate& gate) {
  const auto start = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step_;
  r.tokens = batch.batch * batch.seq_len;
  LossSum loss = accumulate_gradients(batch);
  // The one read-back of the step: the loss sum and the squared gradient norm, together.
  const Tensor scalars = backend_.alloc({2}, DType::F64);
  backend_.copy(loss.sum, scalars.view(0, {1}));
  backend_.sum_squares(scalars.view(1, {1}), grads_.flat());
  const std::vector<double> host = to_host_f64(backend_, scalars);
  r.loss = host[0] / static_cast<double>(loss.n_valid);
  r.grad_norm = std::sqrt(host[1]);
  r.lr = config_.schedule.at(step_);
  if (judge_step(gate, step_, r, [&] { return nonfinite_tensors(backend_, grads_); }))
    optimizer_.update(params_, grads_, r.lr, ++updates_, clip_coefficient(r.grad_norm, config_.grad_clip));
  if (r.verdict != StepVerdict::Rollback) ++step_;  // a skipped step still counts
  backend_.synchronize();  // the step's time includes the device's work, not just its launch
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

double Trainer::eval_loss(const data::Batch& batch) {
  const ForwardOnly forward_only(model_);  // no backward follows: nothing kept for one
  const int64_t T = batch.seq_len, micro = config_.train.micro_batches;
  const int64_t per_micro = batch.batch % micro == 0 ? batch.batch / micro : batch.batch;
  LossSum total{alloc_scalar(backend_), 0};
  for (int64_t first = 0; first < batch.batch; first += per_micro) {
    LossSum part = model_.forward(params_, batch.tokens.data() + first * T, batch.targets.data() + first * T,
                                  per_micro, T);
    backend_.add_inplace(total.sum, part.sum);
    total.n_valid += part.n_valid;
  }
  return total.n_valid ? read_scalar(backend_, total.sum) / static_cast<double>(total.n_valid) : 0.0;
}

MemoryReport Trainer::memory() const {
  return {params_.flat().bytes(), grads_.flat().bytes(), optimizer_.m().flat().bytes() + optimizer_.v().flat().bytes(),
          model_.activation_bytes(), 0};
}

std::vector<StateRegion> Trainer::state_regions() {
  std::vector<StateRegion> regions;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& spec = params_.specs()[i];
    const std::vector<LogicalRun> whole = {{0, 0, shape_numel(spec.shape)}};
    regions.push_back({spec.name, spec.shape, "param", params_.at(i), whole, true});
    regions.push_back({spec.name, spec.shape, "adam_m", optimizer_.m().at(i), whole, true});
    regions.push_back({spec.name, spec.shape, "adam_v", optimizer_.v().at(i), whole, true});
  }
  return regions;
}

}  // namespace tripod
