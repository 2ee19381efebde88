#include "train/distributed_trainer.h"

#include <chrono>
#include <cmath>
#include <map>

#include "comm/self_communicator.h"
#include "core/host_memory.h"

namespace tripod {
namespace {

bool tensor_parallel(const DataParallelSettings& s) { return s.tp != nullptr && s.tp->size() > 1; }
int pipeline_size(const DataParallelSettings& s) { return s.pipeline.pp ? s.pipeline.pp->size() : 1; }

std::unique_ptr<tp::TensorParallelLayers> make_tp_layers(const RunConfig& config, const DataParallelSettings& s) {
  check(!s.sequence_parallel || tensor_parallel(s), "sequence parallelism needs tensor parallelism (tp > 1)");
  return tensor_parallel(s) ? std::make_unique<tp::TensorParallelLayers>(config.model, *s.tp, s.sequence_parallel)
                            : nullptr;
}

PipelineSchedule make_checked_schedule(const RunConfig& config, const DataParallelSettings& s) {
  const int p = pipeline_size(s), v = s.pipeline.virtual_stages;
  check(v == 1 || p > 1, "virtual stages (", v, ") need pipeline parallelism (pp > 1)");
  const int64_t m = config.train.micro_batches;
  check(m >= 1 && m <= 1 << 20, "train.micro_batches must be in [1, 2^20] (got ", m, ")");
  PipelineSchedule schedule = make_schedule(s.pipeline.schedule, p, static_cast<int>(m), v);
  check_message_tags(schedule);
  return schedule;
}

// This TP rank's shards of a chunk's tensors as parameter specs (local shapes, same names, init
// and decay), and how they map to the logical tensors.
std::unique_ptr<TensorParallelShards> chunk_tp_shards(const RunConfig& config, const DataParallelSettings& s,
                                                      const std::vector<ParamSpec>& span_specs) {
  auto t = std::make_unique<TensorParallelShards>();
  if (!tensor_parallel(s)) return t;
  t->comm = s.tp;
  const std::vector<ParamSpec> all = gpt_param_specs(config.model);
  const std::vector<tp::TpShard> shards = tp::tp_shards(config.model, s.tp->size(), s.tp->rank());
  for (const ParamSpec& spec : span_specs)
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i].name == spec.name) {
        t->logical.push_back(all[i]);
        t->shards.push_back(shards[i]);
      }
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
      own_pp_(settings.pipeline.pp ? nullptr : std::make_unique<SelfCommunicator>("pp", &backend)),
      pp_(settings.pipeline.pp ? settings.pipeline.pp : own_pp_.get()),
      embedding_(settings.pipeline.embedding),
      tp_layers_(make_tp_layers(config, settings)),
      split_(config.model.n_layer, pipeline_size(settings), settings.pipeline.virtual_stages,
             settings.pipeline.layers_per_chunk.empty() ? config.train.pipeline_split
                                                        : settings.pipeline.layers_per_chunk),
      schedule_(make_checked_schedule(config, settings)),
      sequence_parallel_(settings.sequence_parallel),
      skip_tied_reduction_(settings.pipeline.skip_tied_embedding_reduction) {
  const int64_t B = config_.train.batch_size, n = dp_.size(), micro = config_.train.micro_batches;
  check(B % n == 0, "train.batch_size (", B, ") does not divide among ", n, " data-parallel ranks");
  check((B / n) % micro == 0, "the per-rank batch of ", B / n, " sequences (train.batch_size / dp) does not split into ",
        micro, " micro-batches (train.micro_batches)");
  const bool pipelined = pp_->size() > 1, tied = config_.model.tie_embeddings;
  // The tied wte's bucket is made the same size on both stages (the first stage's holds wpe too),
  // so the two stages reduce it over DP with the same calls on the same data: equal bits, not
  // merely equal values, whatever the DP size.
  int64_t embedding_bucket = 0;
  if (pipelined && tied) {
    const std::vector<ParamSpec> first = span_param_specs(config_.model, split_.span(0));
    for (const ParamSpec& spec : local_specs(first, *chunk_tp_shards(config_, settings, first)))
      if (spec.name == "wte.weight" || spec.name == "wpe.weight") embedding_bucket += shape_numel(spec.shape);
  }
  for (int index : split_.chunks_of_rank(pp_->rank())) {
    Chunk c;
    c.index = index;
    const StageSpan span = split_.span(index);
    c.model = std::make_unique<Gpt>(config_.model, backend_, config_.train.dtype, tp_layers_.get(), span);
    c.tp_shards = chunk_tp_shards(config_, settings, c.model->specs());
    c.tied_primary = pipelined && tied && span.embedding;
    c.tied_copy = pipelined && tied && span.head && !span.embedding;
    // The two copies of a tied wte are summed across stages before their DP reduction.
    const bool defer = c.tied_primary || c.tied_copy;
    check(!defer || (embedding_ != nullptr && embedding_->size() == 2), "pipeline stage ", pp_->rank(),
          " holds a tied wte but has no embedding group of the first and last stage (ProcessGrid::embedding)");
    c.engine = std::make_unique<ZeroEngine>(local_specs(c.model->specs(), *c.tp_shards), config_.model.n_layer,
                                            settings.zero_stage, settings.bucket_bytes, dp_, backend_,
                                            config_.train.dtype, config_.adamw, c.tp_shards.get(),
                                            defer ? std::vector<int>{embedding_group()} : std::vector<int>{},
                                            embedding_bucket);
    c.engine->skip_reduction_of_bucket(settings.skip_reduction_of_bucket);
    chunks_.push_back(std::move(c));
  }
}

DistributedTrainer::~DistributedTrainer() = default;

int64_t DistributedTrainer::local_batch() const { return config_.train.batch_size / dp_.size(); }

DistributedTrainer::Chunk& DistributedTrainer::chunk(int index) {
  for (Chunk& c : chunks_)
    if (c.index == index) return c;
  fail("pipeline rank ", pp_->rank(), " does not hold chunk ", index);
}

int DistributedTrainer::max_microbatches_in_flight() const {
  int most = 0;
  for (const Chunk& c : chunks_) most = std::max(most, c.model->slots_allocated());
  return most;
}

void DistributedTrainer::reserve_activations() {
  // As many activation slots per chunk as the schedule keeps its micro-batches in flight, so the
  // memory printed at start-up is the step's peak (1F1B: up to p - rank; AFAB: m).
  std::map<int, int> in_flight, most;
  for (const PipelineAction& a : schedule_.ranks[static_cast<std::size_t>(pp_->rank())]) {
    if (a.kind == ActionKind::Forward) most[a.chunk] = std::max(most[a.chunk], ++in_flight[a.chunk]);
    if (a.kind == ActionKind::Backward) --in_flight[a.chunk];
  }
  for (Chunk& c : chunks_) {
    std::vector<int> claimed;
    for (int i = 0; i < most[c.index]; ++i)
      claimed.push_back(c.model->claim_slot(local_batch() / config_.train.micro_batches, config_.train.seq_len));
    for (int slot : claimed) c.model->release_slot(slot);
  }
}

void DistributedTrainer::initialise() {
  for (Chunk& c : chunks_) c.engine->initialise(config_.train.seed);
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
  const int64_t per_micro = local / micro;

  if (backward)
    for (Chunk& c : chunks_) c.engine->zero_grads();
  // Per micro-batch loss sums, on the device (non-zero on the last stage only).
  const Tensor loss_parts = backend_.alloc({micro}, DType::F64);
  std::map<std::pair<int, int>, int> slots;                             // (micro-batch, chunk) -> activation slot
  std::map<int, int> eval_slot;  // forward only: a chunk's previous slot, free once its output was sent
  auto slot_of = [&](int mb, int chunk) {
    auto it = slots.find({mb, chunk});
    check(it != slots.end(), "micro-batch ", mb, " of chunk ", chunk, " has no activations (schedule out of order)");
    return it->second;
  };

  PipelineWork work;
  work.boundary_buffer = [&] {
    const int64_t rows = tp_layers_ ? tp_layers_->local_tokens(per_micro * T) : per_micro * T;
    return backend_.alloc({rows, config_.model.d_model}, config_.train.dtype);
  };
  work.forward = [&](int mb, int index, const Tensor* input) {
    Chunk& c = chunk(index);
    if (!backward && eval_slot.count(index)) c.model->release_slot(eval_slot[index]);
    const int slot = c.model->claim_slot(per_micro, T);
    slots[{mb, index}] = slot;
    if (!backward) eval_slot[index] = slot;
    if (input) backend_.copy(*input, c.model->input(slot));
    const int64_t offset = (dp_.rank() * local + mb * per_micro) * T;
    const LossSum part = c.model->forward_slot(*c.engine, slot, batch.tokens.data() + offset,
                                               batch.targets.data() + offset);
    if (c.model->span().head) backend_.copy(part.sum, loss_parts.view(mb, {1}));
  };
  work.backward = [&](int mb, int index, const Tensor* output_grad) {
    Chunk& c = chunk(index);
    const int slot = slot_of(mb, index);
    if (output_grad) backend_.copy(*output_grad, c.model->output_grad());
    // A chunk's backwards run in micro-batch order: ZeRO 0/1 reduce after the last one, 2/3 after
    // each. A backward's reductions are waited for only when the chunk's next backward begins (or
    // after the schedule), so they overlap the rest of the pipeline instead of delaying the
    // gradient the previous stage waits for.
    c.engine->finish_backward();
    c.engine->begin_backward(mb == micro - 1);
    c.model->backward_slot(*c.engine, slot, grad_scale);
    c.model->release_slot(slot);
    slots.erase({mb, index});
  };
  work.output = [&](int mb, int index) { return chunk(index).model->output(slot_of(mb, index)); };
  work.input_grad = [&](int, int index) { return chunk(index).model->input_grad(); };

  std::vector<ActionTiming> timings = run_pipeline(schedule_, *pp_, backend_, work, /*forward_only=*/!backward);
  if (backward) {
    timings_ = std::move(timings);
  } else {
    for (const auto& [index, slot] : eval_slot) chunk(index).model->release_slot(slot);
  }

  if (backward) {
    for (Chunk& c : chunks_) c.engine->finish_backward();
    // Tied embeddings: sum the first stage's and the last stage's wte gradients, then reduce over DP.
    for (Chunk& c : chunks_) {
      if (!c.tied_primary && !c.tied_copy) continue;
      const Tensor& g = c.engine->grad("wte.weight");
      if (!skip_tied_reduction_) embedding_->all_reduce(g, g, ReduceOp::Sum);
      c.engine->reduce_deferred();
    }
    // Sequence parallelism leaves the LayerNorm and row-parallel bias gradients partial per TP rank.
    if (sequence_parallel_)
      for (Chunk& c : chunks_) c.engine->all_reduce_partial_tp_grads();
  }
  Tensor total = alloc_scalar(backend_);
  for (int64_t mb = 0; mb < micro; ++mb) backend_.add_inplace(total, loss_parts.view(mb, {1}));  // in micro-batch order
  if (pp_->size() > 1) pp_->all_reduce(total, total, ReduceOp::Sum);  // only the last stage's is non-zero
  dp_.all_reduce(total, total, ReduceOp::Sum);
  return {total, n_valid};
}

StepResult DistributedTrainer::train_step(const data::Batch& batch) {
  const auto start = std::chrono::steady_clock::now();
  StepResult r;
  r.step = step_;
  r.tokens = batch.batch * batch.seq_len;
  const LossSum loss = forward_backward(batch, true);
  Tensor squares = alloc_scalar(backend_);
  for (Chunk& c : chunks_)
    backend_.add_inplace(squares, c.engine->grad_sum_squares(c.tied_copy ? std::set<std::string>{"wte.weight"}
                                                                          : std::set<std::string>{}));
  if (pp_->size() > 1) pp_->all_reduce(squares, squares, ReduceOp::Sum);
  // The one read-back of the step: the loss and the squared norm, together.
  const Tensor scalars = backend_.alloc({2}, DType::F64);
  backend_.copy(loss.sum, scalars.view(0, {1}));
  backend_.copy(squares, scalars.view(1, {1}));
  const std::vector<double> host = to_host_f64(backend_, scalars);
  r.loss = host[0] / static_cast<double>(loss.n_valid);
  r.grad_norm = std::sqrt(host[1]);
  // The loss and the norm are all-reduced, so every rank takes the same decision here.
  check(std::isfinite(r.loss), "step ", step_, ": the loss is ", r.loss,
        " (training diverged); parameters were not updated with this step's gradients");
  if (!std::isfinite(r.grad_norm)) {
    std::string names;
    for (Chunk& c : chunks_)
      for (const std::string& name : c.engine->nonfinite_grads()) names += (names.empty() ? "" : ", ") + name;
    fail("step ", step_, ": the gradient norm is ", r.grad_norm, " (training diverged; non-finite gradients on this rank: ",
         names.empty() ? "none, another rank holds them" : names, "); parameters were not updated with this step's gradients");
  }
  r.lr = config_.schedule.at(step_);
  for (Chunk& c : chunks_) c.engine->optimizer_step(r.lr, step_ + 1, clip_coefficient(r.grad_norm, config_.grad_clip));
  ++step_;
  backend_.synchronize();  // the step's time includes the device's work, not just its launch
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

double DistributedTrainer::eval_loss(const data::Batch& batch) {
  const LossSum loss = forward_backward(batch, false);
  return read_scalar(backend_, loss.sum) / static_cast<double>(loss.n_valid);
}

std::vector<std::vector<double>> DistributedTrainer::gather_params() {
  std::map<std::string, std::vector<double>> held;
  for (Chunk& c : chunks_) {
    std::vector<std::vector<double>> values = c.engine->gather_params();
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!c.tied_copy || c.model->specs()[i].name != "wte.weight") held[c.model->specs()[i].name] = std::move(values[i]);
  }
  std::vector<std::vector<double>> out;
  for (const ParamSpec& spec : gpt_param_specs(config_.model)) {
    const int owner = split_.owner_rank(spec.name);
    std::vector<double> values(static_cast<std::size_t>(shape_numel(spec.shape)));
    if (owner == pp_->rank()) values = held.at(spec.name);
    if (pp_->size() > 1) pp_->broadcast(host_view(values), owner);  // host values: no device round trip
    out.push_back(std::move(values));
  }
  return out;
}

MemoryReport DistributedTrainer::memory() const {
  MemoryReport report{0, 0, 0, 0, 0};
  for (const Chunk& c : chunks_) {
    const ZeroMemory z = c.engine->memory();
    report = {report.params + z.params, report.grads + z.grads, report.optimizer + z.optimizer,
              report.activations + c.model->activation_bytes(), report.transient + z.peak_transient};
  }
  return report;
}

void DistributedTrainer::save(const std::string& dir) {
  fail("cannot save ", dir, ": checkpoints of data-parallel / ZeRO / pipeline runs need the sharded checkpoint format, ",
       "which is not implemented yet (single-process runs checkpoint with --save)");
}

void DistributedTrainer::resume(const std::string& dir) {
  fail("cannot resume from ", dir, ": data-parallel / ZeRO / pipeline runs cannot load checkpoints until the sharded ",
       "checkpoint format is implemented");
}

}  // namespace tripod
