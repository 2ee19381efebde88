// One step of the DistributedTrainer: forward (and backward) of every micro-batch through the
// pipeline schedule, the reductions that follow backward, the norm, and the update.
#include <chrono>
#include <cmath>
#include <algorithm>
#include <map>
#include <memory>

#include "train/distributed_trainer.h"

namespace tripod {

// What one pass over the schedule keeps: the slice of the global batch, the activation slot of
// every (micro-batch, chunk) in flight, and the per-micro-batch loss sums (on the last stage).
struct DistributedTrainer::StepRun {
  DistributedTrainer& t;
  const data::Batch& batch;
  bool backward;
  double grad_scale;
  int64_t per_micro;
  Tensor loss_parts;                          // fp64 [m] on the device
  std::map<std::pair<int, int>, int> slots;   // (micro-batch, chunk) -> activation slot
  std::map<int, int> eval_slot;               // forward only: a chunk's previous slot, free once sent
  std::size_t message_bytes = 0;              // of the executor's message buffers, all held to the end

  int slot_of(int mb, int chunk) const {
    auto it = slots.find({mb, chunk});
    check(it != slots.end(), "micro-batch ", mb, " of chunk ", chunk, " has no activations (schedule out of order)");
    return it->second;
  }

  void forward(int mb, int index, const Tensor* input) {
    Chunk& c = t.chunk(index);
    if (!backward && eval_slot.count(index)) c.model->release_slot(eval_slot[index]);
    const int slot = c.model->claim_slot(per_micro, batch.seq_len);
    slots[{mb, index}] = slot;
    if (!backward) eval_slot[index] = slot;
    if (input) t.backend_.copy(*input, c.model->input(slot));
    c.engine->begin_forward();
    const int64_t offset = (t.dp_.rank() * t.local_batch() + mb * per_micro) * batch.seq_len;
    const LossSum part =
        c.model->forward_slot(*c.engine, slot, batch.tokens.data() + offset, batch.targets.data() + offset,
                              backward ? std::optional<double>(grad_scale) : std::nullopt);
    if (c.model->span().head) t.backend_.copy(part.sum, loss_parts.view(mb, {1}));
  }

  void run_backward(int mb, int index, const Tensor* output_grad) {
    Chunk& c = t.chunk(index);
    const int slot = slot_of(mb, index);
    int read_slot = slot;  // the activations the backward reads
    // Not on the loss head's chunk: its slot also holds the loss state that each backward consumes
    // once, so a mix-up there failed that stage's ranks alone with an error while the others waited
    // out the layout's timeout, and the job ended before the later layouts ran.
    if (t.faults_.has(Fault::PipelineSlotMixup) && !c.model->span().head && slots.count({mb ^ 1, index}))
      read_slot = slot_of(mb ^ 1, index);
    if (output_grad) t.backend_.copy(*output_grad, c.model->output_grad());
    // A chunk's backwards run in micro-batch order: ZeRO 0/1 reduce after the last one, 2/3 after
    // each. A backward's reductions are waited for only when the chunk's next backward begins (or
    // after the schedule), so they overlap the rest of the pipeline instead of delaying the
    // gradient the previous stage waits for.
    c.engine->finish_backward();
    c.engine->begin_backward(mb == t.layout_.micro_batches - 1);
    c.model->backward_slot(*c.engine, read_slot, grad_scale);
    c.model->release_slot(slot);
    slots.erase({mb, index});
  }

  PipelineWork work() {
    PipelineWork w;
    w.boundary_buffer = [this] {
      const int64_t tokens = per_micro * batch.seq_len;
      const int64_t rows = t.tp_layers_ ? t.tp_layers_->local_tokens(tokens) : tokens;
      Tensor buffer = t.backend_.alloc({rows, t.config_.model.d_model}, t.config_.train.dtype);
      message_bytes += buffer.bytes();  // the executor pools it until the pass ends
      return buffer;
    };
    w.forward = [this](int mb, int index, const Tensor* input) { forward(mb, index, input); };
    w.backward = [this](int mb, int index, const Tensor* grad) { run_backward(mb, index, grad); };
    w.output = [this](int mb, int index) { return t.chunk(index).model->output(slot_of(mb, index)); };
    w.input_grad = [this](int, int index) { return t.chunk(index).model->input_grad(); };
    return w;
  }
};

LossSum DistributedTrainer::forward_backward(const data::Batch& batch, bool backward) {
  check(batch.batch == config_.train.batch_size, "expected a global batch of ", config_.train.batch_size,
        " sequences, got ", batch.batch);
  int64_t n_valid = 0;  // of the whole global batch: every rank sees it, so no communication needed
  for (int32_t t : batch.targets) n_valid += t >= 0;
  check(n_valid > 0, "step ", step_ + 1, ": the batch has no valid (non-ignored) targets");
  if (faults_.has(Fault::LocalTokenCount)) {  // only this DP rank's slice counted
    const int64_t first = dp_.rank() * local_batch() * batch.seq_len, count = local_batch() * batch.seq_len;
    n_valid = 0;
    for (int64_t i = first; i < first + count; ++i) n_valid += batch.targets[static_cast<std::size_t>(i)] >= 0;
    n_valid = std::max<int64_t>(n_valid, 1);
  }
  double grad_scale = 1.0 / static_cast<double>(n_valid);
  if (faults_.has(Fault::SecondDpAverage)) grad_scale /= dp_.size();
  const int64_t micro = layout_.micro_batches;
  if (backward)
    for (Chunk& c : chunks_) c.engine->zero_grads();

  StepRun run{*this, batch, backward, grad_scale, local_batch() / micro,
              backend_.alloc({micro}, DType::F64), {}, {}};
  std::vector<ActionTiming> timings = run_pipeline(schedule_, pp_, backend_, run.work(), /*forward_only=*/!backward,
                                                    layout_.receives_ahead);
  message_bytes_ = std::max(message_bytes_, run.message_bytes);
  if (backward) {
    timings_ = std::move(timings);
    reduce_after_backward();
  } else {
    for (const auto& [index, slot] : run.eval_slot) chunk(index).model->release_slot(slot);
  }
  Tensor total = alloc_scalar(backend_);
  for (int64_t mb = 0; mb < micro; ++mb) backend_.add_inplace(total, run.loss_parts.view(mb, {1}));  // in order
  if (pp_.size() > 1) pp_.all_reduce(total, total, ReduceOp::Sum);  // only the last stage's is non-zero
  check(!(faults_.has(Fault::FailOneRank) && dp_.rank() == 1),
        "planted fault fail-one-rank: data-parallel rank 1's loss check failed");
  if (!(faults_.has(Fault::HangOneRank) && dp_.rank() == 1)) dp_.all_reduce(total, total, ReduceOp::Sum);
  return {total, n_valid};
}

void DistributedTrainer::reduce_after_backward() {
  for (Chunk& c : chunks_) c.engine->finish_backward();
  // Tied embeddings: sum the first stage's and the last stage's wte gradients, then reduce over DP.
  for (Chunk& c : chunks_) {
    if (!c.tied_primary && !c.tied_copy) continue;
    const Tensor& g = c.engine->grad(c.wte);
    if (!faults_.has(Fault::SkipTiedEmbeddingReduction)) grid_.embedding()->all_reduce(g, g, ReduceOp::Sum);
    c.engine->reduce_deferred();
  }
  // Sequence parallelism leaves the LayerNorm and row-parallel bias gradients partial per TP rank:
  // summed over TP after the DP reduction (the pieces are the same on every TP rank).
  if (!layout_.sequence_parallel || faults_.has(Fault::SpSkipGradAllReduce)) return;
  for (Chunk& c : chunks_)
    for (const auto& [i, piece] : c.engine->updated_grad_pieces())
      if (tp::tp_grad_needs_allreduce(c.engine->specs()[i], true)) grid_.tp().all_reduce(piece, piece, ReduceOp::Sum);
}

Tensor DistributedTrainer::grad_sum_squares() {
  // Tensors every TP rank holds whole (LayerNorms, row-parallel biases, wpe) count on TP rank 0
  // only; a pipeline's second copy of a tied wte not at all.
  Tensor squares = alloc_scalar(backend_);
  for (Chunk& c : chunks_) {
    const std::vector<ParamSpec>& specs = c.engine->specs();
    auto counted = [&](std::size_t i) {
      if (layout_.tp > 1 && grid_.tp_rank() != 0 && tp::tp_replicated(specs[i]) &&
          !faults_.has(Fault::NormCountsReplicated))
        return false;
      return !(c.tied_copy && i == c.wte);
    };
    const Tensor sum = c.engine->grad_sum_squares(counted);  // summed over DP
    if (layout_.tp > 1) grid_.tp().all_reduce(sum, sum, ReduceOp::Sum);
    backend_.add_inplace(squares, sum);
  }
  if (pp_.size() > 1) pp_.all_reduce(squares, squares, ReduceOp::Sum);
  return squares;
}

std::string DistributedTrainer::nonfinite_grads() {
  std::vector<std::string> names;
  for (Chunk& c : chunks_) {
    const std::vector<std::string> chunk = c.engine->nonfinite_grads();
    names.insert(names.end(), chunk.begin(), chunk.end());
  }
  return names.empty() ? "none, another rank holds them" : name_list(names);
}

StepResult DistributedTrainer::train_step(const data::Batch& batch, const StepGate& gate) {
  const auto start = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step_;
  r.tokens = batch.batch * batch.seq_len;
  const LossSum loss = forward_backward(batch, true);
  const Tensor squares = grad_sum_squares();
  // The one read-back of the step: the loss and the squared norm, together.
  const Tensor scalars = backend_.alloc({2}, DType::F64);
  backend_.copy(loss.sum, scalars.view(0, {1}));
  backend_.copy(squares, scalars.view(1, {1}));
  const std::vector<double> host = to_host_f64(backend_, scalars);
  r.loss = host[0] / static_cast<double>(loss.n_valid);
  r.grad_norm = std::sqrt(host[1]);
  // The loss and the norm are all-reduced, so every rank takes the same decision here.
  r.lr = config_.schedule.at(step_);
  if (judge_step(gate, step_, r, [&] { return nonfinite_grads() + " (this rank's view)"; })) {
    ++updates_;
    for (Chunk& c : chunks_) c.engine->optimizer_step(r.lr, updates_, clip_coefficient(r.grad_norm, config_.grad_clip));
  }
  if (r.verdict != StepVerdict::Rollback) ++step_;  // a skipped step still counts
  backend_.synchronize();  // the step's time includes the device's work, not just its launch
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

double DistributedTrainer::eval_loss(const data::Batch& batch) {
  std::vector<std::unique_ptr<ForwardOnly>> forward_only;  // no backward follows: nothing kept for one
  for (Chunk& c : chunks_) forward_only.push_back(std::make_unique<ForwardOnly>(*c.model));
  const LossSum loss = forward_backward(batch, false);
  return read_scalar(backend_, loss.sum) / static_cast<double>(loss.n_valid);
}

}  // namespace tripod
