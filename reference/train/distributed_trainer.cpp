// Construction, memory and parameter gathering of the DistributedTrainer; the step itself is in
// distributed_step.cpp.
#include "train/distributed_trainer.h"

#include <map>

#include "core/host_memory.h"

namespace tripod {
namespace {

StepShape step_shape(const RunConfig& config) {
  return {config.train.batch_size, config.train.seq_len, config.train.pipeline_split};
}

// The layout, checked against this model and step before anything is built from it.
const ParallelLayout& validated(const ParallelLayout& layout, const RunConfig& config, const ProcessGrid& grid) {
  const GridShape g = grid.shape(), l = layout.grid();
  TRIPOD_CHECK(g.tp == l.tp && g.pp == l.pp && g.dp == l.dp, "the process grid (", describe(g),
               ") is not the layout's (", describe(l), ")");
  layout.validate(config.model, step_shape(config));
  return layout;
}

// Where the tied wte sits in a chunk's specs (0 when it holds none).
std::size_t index_of_wte(const std::vector<ParamSpec>& specs) {
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (specs[i].role == ParamRole::TokenEmbedding) return i;
  return 0;
}

}  // namespace

DistributedTrainer::DistributedTrainer(const RunConfig& config, Backend& backend, const ProcessGrid& grid,
                                       const ParallelLayout& layout, const FaultPlan& faults)
    : config_(config),
      backend_(backend),
      grid_(grid),
      layout_(validated(layout, config, grid)),
      faults_(faults),
      dp_(grid.dp()),
      pp_(grid.pp()),
      tp_layers_(layout_.sharded_parameters()
                     ? std::make_unique<tp::TensorParallelLayers>(config.model, grid.tp(), layout_.sequence_parallel,
                                                                  &faults_, layout_.vocab_multiple)
                     : nullptr),
      split_(config.model.n_layer, layout_.pp, layout_.virtual_stages, config.train.pipeline_split),
      schedule_(make_schedule(layout_.schedule, layout_.pp, layout_.micro_batches, layout_.virtual_stages)) {
  apply_precision_policy(config.train, backend_);
  // The tied wte's bucket is made the same size on both stages (the first stage's holds wpe too),
  // so the two stages reduce it over DP with the same calls on the same data: equal bits, not
  // merely equal values, whatever the DP size.
  int64_t embedding_bucket = 0;
  if (layout_.pipelined() && config_.model.tie_embeddings)
    for (const ParamSpec& spec : span_param_specs(config_.model, split_.span(0)))
      if (spec.group == embedding_group()) embedding_bucket += shape_numel(local_shape(spec));
  for (int index : split_.chunks_of_rank(pp_.rank())) chunks_.push_back(make_chunk(index, embedding_bucket));
}

DistributedTrainer::Chunk DistributedTrainer::make_chunk(int index, int64_t embedding_bucket) {
  Chunk c;
  c.index = index;
  const StageSpan span = split_.span(index);
  c.model = std::make_unique<Gpt>(config_.model, backend_, config_.train.dtype, tp_layers_.get(), span,
                                  config_.train.recompute);
  // ZeRO-3 frees each layer's gathered weights after use: copies of them kept for the backward
  // would hold the whole model on every rank. Its backward gathers and rounds them again.
  if (layout_.zero == 3) c.model->set_keep_weight_copies(false);
  // This TP rank's shards of the chunk's tensors (local shapes, same identities) and their map to
  // the logical tensors.
  std::vector<ParamSpec> specs = c.model->specs();
  if (layout_.sharded_parameters()) {
    c.tp_shards = std::make_unique<TensorParallelShards>();
    c.tp_shards->comm = &grid_.tp();
    c.tp_shards->logical = specs;
    for (ParamSpec& spec : specs) {
      c.tp_shards->shards.push_back(tp::tp_shard(spec, layout_.tp, grid_.tp_rank(), layout_.vocab_multiple));
      spec.shape = local_shape(spec);
    }
  }
  const bool pipelined = layout_.pipelined(), tied = config_.model.tie_embeddings;
  c.tied_primary = pipelined && tied && span.embedding;
  c.tied_copy = pipelined && tied && span.head && !span.embedding;
  c.wte = index_of_wte(specs);
  // The two copies of a tied wte are summed across stages before their DP reduction.
  const bool defer = c.tied_primary || c.tied_copy;
  check(!defer || (grid_.embedding() != nullptr && grid_.embedding()->size() == 2), "pipeline stage ", pp_.rank(),
        " holds a tied wte but has no embedding group of the first and last stage (ProcessGrid::embedding)");
  ZeroSettings settings{layout_.zero, layout_.bucket_bytes, config_.train.dtype, config_.adamw,
                        defer ? std::vector<int>{embedding_group()} : std::vector<int>{}, embedding_bucket,
                        layout_.zero3_prefetch, {}, {}};
  settings.bf16_operand_gathers = gathers_gemm_weights_as_bf16(layout_, config_.train);
  settings.overlap_param_gather = layout_.overlap_param_gather;
  // A tied wte with its head in this chunk: the head's part of the gradient is reduced while the
  // rest of backward runs, the lookup's rows after it (parallel/gradient_buckets.h).
  if (tied && span.embedding && span.head && config_.train.split_tied_grad) settings.split_groups = {embedding_group()};
  // An untied embedding's gradient is the lookup's rows alone: those rows and wpe are all it sends.
  if (!tied && span.embedding && config_.train.split_tied_grad) {
    settings.split_groups = {embedding_group()};
    settings.sparse_groups = {embedding_group()};
  }
  c.engine = std::make_unique<ZeroEngine>(std::move(specs), settings, dp_, backend_, c.tp_shards.get(), faults_);
  return c;
}

Shape DistributedTrainer::local_shape(const ParamSpec& spec) const {
  return layout_.sharded_parameters() ? tp::tp_shard(spec, layout_.tp, grid_.tp_rank(), layout_.vocab_multiple).local
                                      : spec.shape;
}

DistributedTrainer::~DistributedTrainer() = default;

// Under the bf16-operand policy the GEMM weights' bf16 rounding is all the model reads of them.
bool gathers_gemm_weights_as_bf16(const ParallelLayout& layout, const TrainSettings& train) {
  return layout.zero >= 1 && layout.dp > 1 && train.bf16_mixed && train.dtype == DType::F32 &&
         !layout.fp32_param_gathers;
}

RunConfig layout_run_config(const RunConfig& base, const ParallelLayout& layout) {
  nlohmann::json j = base.json;
  j["train"]["micro_batches"] = layout.micro_batches;
  j["train"]["recompute"] = recompute_name(layout.recompute);
  return parse_run_config(j);
}

int64_t DistributedTrainer::local_batch() const { return config_.train.batch_size / dp_.size(); }

DistributedTrainer::Chunk& DistributedTrainer::chunk(int index) {
  for (Chunk& c : chunks_)
    if (c.index == index) return c;
  fail("pipeline rank ", pp_.rank(), " does not hold chunk ", index);
}

int64_t DistributedTrainer::param_gathered_bytes() const {
  int64_t bytes = 0;
  for (const Chunk& c : chunks_) bytes += c.engine->gathered_bytes();
  return bytes;
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
  for (const PipelineAction& a : schedule_.ranks[static_cast<std::size_t>(pp_.rank())]) {
    if (a.kind == ActionKind::Forward) most[a.chunk] = std::max(most[a.chunk], ++in_flight[a.chunk]);
    if (a.kind == ActionKind::Backward) --in_flight[a.chunk];
  }
  for (Chunk& c : chunks_) {
    std::vector<int> claimed;
    for (int i = 0; i < most[c.index]; ++i)
      claimed.push_back(c.model->claim_slot(local_batch() / layout_.micro_batches, config_.train.seq_len));
    for (int slot : claimed) c.model->release_slot(slot);
  }
  if (tp_layers_)
    tp_layers_->reserve(backend_, local_batch() / layout_.micro_batches * config_.train.seq_len, config_.model.d_model,
                        config_.train.dtype);
}

void DistributedTrainer::initialise() {
  for (Chunk& c : chunks_) c.engine->initialise(config_.train.seed);
  step_ = updates_ = 0;
}

std::vector<std::vector<double>> DistributedTrainer::gather_params() {
  std::map<std::string, std::vector<double>> held;
  for (Chunk& c : chunks_) {
    std::vector<std::vector<double>> values = c.engine->gather_params();
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!(c.tied_copy && i == c.wte)) held[c.model->specs()[i].name] = std::move(values[i]);  // the primary's
  }
  std::vector<std::vector<double>> out;
  for (const ParamSpec& spec : gpt_param_specs(config_.model)) {
    const int owner = split_.owner_rank(spec);
    std::vector<double> values(static_cast<std::size_t>(shape_numel(spec.shape)));
    if (owner == pp_.rank()) values = held.at(spec.name);
    if (pp_.size() > 1) pp_.broadcast(host_view(values), owner);  // host values: no device round trip
    out.push_back(std::move(values));
  }
  return out;
}

MemoryReport DistributedTrainer::memory() const {
  MemoryReport report{0, 0, 0, 0, 0};
  for (const Chunk& c : chunks_) {
    const ZeroMemory z = c.engine->memory();
    report = {report.params + z.params, report.grads + z.grads, report.optimizer + z.optimizer,
              report.activations + c.model->activation_bytes(),
              report.transient + z.peak_transient};
  }
  if (tp_layers_) report.activations += tp_layers_->held_bytes();  // shared by the chunks: once
  report.transient += message_bytes_;
  return report;
}

std::vector<StateRegion> DistributedTrainer::state_regions() {
  std::vector<StateRegion> regions;
  for (Chunk& c : chunks_) {
    const std::vector<ParamSpec>& specs = c.model->specs();  // logical shapes and roles
    std::vector<bool> writes(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i)
      writes[i] = !(c.tied_copy && i == c.wte) && (layout_.tp == 1 || !tp::tp_replicated(specs[i]) || grid_.tp_rank() == 0);
    for (StateRegion& r : c.engine->state_regions(writes)) regions.push_back(std::move(r));
  }
  return regions;
}

}  // namespace tripod
