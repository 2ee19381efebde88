#include "parallel/zero_engine.h"

#include <algorithm>

#include "backend/transfer.h"
#include "model/param_set.h"
#include "parallel/tp_vocab.h"

namespace tripod {

namespace {

std::vector<int> own_bucket_groups(const ZeroSettings& s) {
  std::vector<int> groups = s.deferred_groups;
  groups.insert(groups.end(), s.split_groups.begin(), s.split_groups.end());
  return groups;
}

}  // namespace

ZeroEngine::ZeroEngine(std::vector<ParamSpec> specs, const ZeroSettings& s, Communicator& dp, Backend& backend,
                       const TensorParallelShards* tp, const FaultPlan& faults)
    : specs_(std::move(specs)),
      faults_(faults),
      policy_(ZeroPolicy::for_stage(s.stage)),
      dtype_(s.dtype),
      dp_(dp),
      backend_(backend),
      // Every stage uses the same buckets, so stages 1-3 shard identically (and agree bit for bit).
      layout_(specs_, param_groups(specs_), dp.size(),
              std::max<int64_t>(1, s.bucket_bytes / static_cast<int64_t>(dtype_size(s.dtype))),
              /*one_group_per_bucket=*/false, own_bucket_groups(s), s.deferred_bucket_min_elements,
              // placed last in their buckets at every stage and precision: all stages shard alike
              gemm_operand_only_flags(specs_)) {
  check(s.bucket_bytes > 0, "the gradient bucket size must be positive (got ", s.bucket_bytes, " bytes)");
  if (tp && tp->comm) tp_ = std::make_unique<TensorParallelShards>(*tp);
  buffers_ = ZeroBuffers::allocate(layout_, policy_, backend_, dtype_);
  param_views_.resize(specs_.size());
  grad_views_.resize(specs_.size());
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (policy_.full_params) param_views_[i] = buffers_.full_params.view(layout_.offsets()[i], specs_[i].shape);
    if (policy_.full_grads) grad_views_[i] = buffers_.full_grads.view(layout_.offsets()[i], specs_[i].shape);
  }
  buckets_ = std::make_unique<GradientBuckets>(layout_, specs_, policy_, dp_, backend_, dtype_, buffers_.full_grads,
                                               buffers_.grad_shard, transient_, faults_);
  for (int group : s.deferred_groups) buckets_->defer(layout_.bucket_of_group(group));
  for (int group : s.split_groups) buckets_->allow_split(layout_.bucket_of_group(group));
  sparse_groups_ = s.sparse_groups;
  bf16_operand_gathers_ = s.bf16_operand_gathers;
  if (policy_.gather_params_on_use)
    gatherer_ = std::make_unique<ParamGatherer>(layout_, specs_, dp_, backend_, dtype_, buffers_.param_shard, transient_,
                                                faults_, s.zero3_prefetch, s.bf16_operand_gathers);
  optimizer_ = std::make_unique<ShardedOptimizer>(layout_, specs_, policy_, buffers_, dp_, backend_, dtype_, s.adamw,
                                                  faults_);
  overlap_param_gather_ = s.overlap_param_gather;
  check(!overlap_param_gather_ || policy_.gather_params_after_step, "overlapped parameter gathers are ZeRO-1/2's ",
        "(their updated slices are all-gathered after the step), not ZeRO-", policy_.stage, "'s");
  bucket_of_tensor_.resize(specs_.size());
  for (std::size_t b = 0; b < layout_.buckets().size(); ++b)
    for (std::size_t i : layout_.buckets()[b].tensors) bucket_of_tensor_[i] = b;
}

ZeroEngine::~ZeroEngine() = default;

void ZeroEngine::optimizer_step(double lr, int64_t step, double grad_scale) {
  settle_updated_params();  // the step writes this rank's slices, which an all-gather in flight reads
  if (gatherer_) gatherer_->drop_all();  // nothing gathered may outlive the shards it came from
  optimizer_->step(lr, step, grad_scale);
  if (!policy_.gather_params_after_step || faults_.has(Fault::StaleZero12Params)) return;
  // Every rank updated its slices; gather the whole parameters back, in place.
  timed(Traffic::Gathers, [&] {
    updated_gather_ =
        std::make_unique<UpdatedParamGather>(layout_, buffers_.full_params, dp_, backend_, transient_,
                                             bf16_operand_gathers_, overlap_param_gather_, faults_.has(Fault::RoundedMasters),
                                             faults_.has(Fault::UnwaitedParamGather));
  });
  updated_gathered_bytes_ += updated_gather_->received_bytes();
  if (updated_gather_->done()) updated_gather_.reset();
}

void ZeroEngine::wait_updated_params(std::size_t tensor) {
  if (!updated_gather_ || faults_.has(Fault::UnwaitedParamGather)) return;
  timed(Traffic::Gathers, [&] { updated_gather_->wait_bucket(bucket_of_tensor_[tensor]); });
  if (updated_gather_->done()) updated_gather_.reset();
}

void ZeroEngine::settle_updated_params() {
  if (!updated_gather_) return;
  timed(Traffic::Gathers, [&] { updated_gather_->wait_all(); });
  updated_gather_.reset();
}

ZeroMemory ZeroEngine::memory() const {
  ZeroMemory m;
  m.params = policy_.full_params ? buffers_.full_params.bytes() : buffers_.param_shard.bytes();
  m.grads = (policy_.full_grads ? buffers_.full_grads.bytes() : 0) +
            (buffers_.grad_shard.defined() ? buffers_.grad_shard.bytes() : 0);
  m.optimizer = optimizer_->bytes();
  m.peak_transient = transient_.peak;
  m.peak_gathered = gatherer_ ? gatherer_->peak_bytes() : 0;
  return m;
}

// This rank's shard of tensor i under tensor parallelism, from the logical initial values.
std::vector<double> ZeroEngine::local_initial(std::size_t i, uint64_t seed) const {
  std::vector<double> local(static_cast<std::size_t>(shape_numel(specs_[i].shape)));
  tp::init_local_shard(tp_->logical[i], tp_->shards[i], seed, local.data());
  return local;
}

void ZeroEngine::initialise(uint64_t seed) {
  settle_updated_params();
  if (gatherer_) gatherer_->drop_all();
  if (policy_.full_params) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (tp_) from_host_f64(backend_, local_initial(i, seed), param_views_[i]);
      else fill_initial_values(backend_, specs_[i], seed, 0, param_views_[i]);
    }
  } else {
    // ZeRO-3: each rank initialises only the pieces it owns (layout-independent initialisation).
    for (const auto& seg : optimizer_->segments()) {
      const Tensor dst = buffers_.param_shard.view(seg.local, {seg.length});
      const int64_t first = seg.flat - layout_.offsets()[seg.tensor];
      if (tp_) {
        const std::vector<double> local = local_initial(seg.tensor, seed);
        from_host_f64(backend_, std::vector<double>(local.begin() + first, local.begin() + first + seg.length), dst);
      } else {
        fill_initial_values(backend_, specs_[seg.tensor], seed, first, dst);
      }
    }
  }
  optimizer_->zero_state();
}

void ZeroEngine::zero_grads() {
  backend_.fill(policy_.full_grads ? buffers_.full_grads : buffers_.grad_shard, 0.0);
  backwards_since_zero_ = 0;
}

const Tensor& ZeroEngine::param(std::size_t index) {
  wait_updated_params(index);  // (acquire_params waited already, unless the caller skipped it)
  return policy_.full_params ? param_views_[index] : gatherer_->view(index);
}

const Tensor& ZeroEngine::grad(std::size_t index) {
  if (const Tensor* redirected = buckets_->redirected(index)) return *redirected;
  return policy_.full_grads ? grad_views_[index] : buckets_->view(index);
}

void ZeroEngine::acquire_params(int group) {
  if (updated_gather_)  // the overlapped after-step gathers of the group's buckets
    for (std::size_t i = 0; i < specs_.size(); ++i)
      if (specs_[i].group == group) wait_updated_params(i);
  timed(Traffic::Reductions, [&] { buckets_->progress(); });  // each hook is a chance for MPI to move the buckets
  if (gatherer_) timed(Traffic::Gathers, [&] { gatherer_->acquire(group); });
}

void ZeroEngine::release_params(int group) {
  if (!gatherer_) return;
  timed(Traffic::Gathers, [&] { gatherer_->release(group); });
  timed(Traffic::Reductions, [&] { buckets_->progress(); });
}

void ZeroEngine::acquire_grads(int group) {
  timed(Traffic::Reductions, [&] { buckets_->acquire(group); });
}

void ZeroEngine::grads_ready(int group) {
  timed(Traffic::Reductions, [&] { buckets_->ready(group); });
}

void ZeroEngine::grads_ready_except_rows(int group, std::size_t sparse, const Tensor& rows) {
  timed(Traffic::Reductions, [&] {
    // A group only the lookup writes is zero until now unless earlier micro-batches accumulated in
    // it (stages 0-1 reduce once per step): then its first part would be all of it, and one
    // reduction at ready() sends less than two.
    const bool lookup_only = std::count(sparse_groups_.begin(), sparse_groups_.end(), group) > 0;
    const bool first_part_zero = lookup_only && (policy_.reduce_every_microbatch || backwards_since_zero_ == 1);
    if (lookup_only && !first_part_zero) return;
    // Every DP rank's micro-batch has as many tokens, so their count bounds each rank's rows alike.
    if (buckets_->splits(group))
      buckets_->ready_except_rows(group, sparse, local_rows(sparse, rows), rows.numel(), first_part_zero);
  });
}

std::vector<int64_t> ZeroEngine::local_rows(std::size_t sparse, const Tensor& rows) const {
  // On the host, so that no device work is waited for in the middle of backward.
  check(rows.dtype() == DType::I32 && rows.on_host(), "ZeroEngine: the rows of '", specs_[sparse].name,
        "' must be int32 ids on the host");
  const int32_t* ids = rows.data<int32_t>();
  int64_t first = 0;  // the logical row of local row 0
  if (tp_) {
    const tp::TpShard& shard = tp_->shards[sparse];
    check(shard.split == tp::TpSplit::VocabRows || shard.split == tp::TpSplit::Replicated, "ZeroEngine: '",
          specs_[sparse].name, "' is split ", tp::tp_split_name(shard.split), " over tensor parallelism, not by rows");
    if (shard.split == tp::TpSplit::VocabRows)
      first = tp::vocab_shard(shard.logical.at(0), shard.size, shard.rank, shard.vocab_multiple).start;
  }
  const int64_t count = specs_[sparse].shape.at(0);
  std::vector<int64_t> local;
  for (int64_t n = 0; n < rows.numel(); ++n)
    if (ids[n] >= first && ids[n] < first + count) local.push_back(ids[n] - first);
  std::sort(local.begin(), local.end());
  local.erase(std::unique(local.begin(), local.end()), local.end());
  return local;
}

std::vector<std::string> ZeroEngine::nonfinite_grads() {
  Tensor counts = backend_.alloc({static_cast<int64_t>(specs_.size())}, DType::F64);
  for (const auto& seg : optimizer_->segments())
    backend_.count_nonfinite(counts.view(static_cast<int64_t>(seg.tensor), {1}), optimizer_->grad_piece(seg));
  const std::vector<double> host = to_host_f64(backend_, counts);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (host[i] > 0) names.push_back(specs_[i].name);
  return names;
}

std::vector<std::vector<double>> ZeroEngine::gather_params() {
  settle_updated_params();
  std::vector<std::vector<double>> out(specs_.size());
  // After a step with bf16 operand gathers (stages 1-2), the other ranks' slices of the full
  // parameters hold bf16 roundings; their exact values are in their owners' slices.
  const bool full_is_exact = !(policy_.gather_params_after_step && bf16_operand_gathers_);
  for (std::size_t b = 0; b < layout_.buckets().size(); ++b) {
    const Bucket& bucket = layout_.buckets()[b];
    Tensor buffer;
    if (gatherer_) {
      buffer = gatherer_->gather_bucket(static_cast<int>(b));
    } else if (!full_is_exact) {
      buffer = backend_.alloc({bucket.size}, dtype_);
      const int64_t slice = bucket.size / layout_.dp();
      dp_.all_gather(buffers_.full_params.view(bucket.start + dp_.rank() * slice, {slice}), buffer);
    }
    for (std::size_t i : bucket.tensors)
      out[i] = to_host_f64(backend_, buffer.defined() ? buffer.view(layout_.offsets()[i] - bucket.start, specs_[i].shape)
                                                      : param_views_[i]);
  }
  if (tp_)  // assemble the logical tensors from the TP shards, in spec order on every rank
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = tp::assemble_full(*tp_->comm, tp_->shards[i], out[i]);
  return out;
}

std::vector<StateRegion> ZeroEngine::state_regions(const std::vector<bool>& writes) {
  settle_updated_params();  // a checkpoint reads the parameters, a load writes them
  check(writes.size() == specs_.size(), "state_regions: ", writes.size(), " write flags for ", specs_.size(), " tensors");
  std::vector<StateRegion> regions;
  const Tensor& m = optimizer_->m();
  const Tensor& v = optimizer_->v();
  for (int r = 0; r < layout_.dp(); ++r) {
    const bool mine = r == dp_.rank();
    for (const ShardLayout::Segment& seg : layout_.segments(r)) {
      const std::size_t i = seg.tensor;
      const ParamSpec& logical = tp_ ? tp_->logical[i] : specs_[i];
      std::vector<LogicalRun> tp_runs;
      if (tp_) {
        for (const tp::ShardRun& run : tp::shard_runs(tp_->shards[i])) tp_runs.push_back({run.local, run.logical, run.length});
      } else {
        tp_runs.push_back({0, 0, shape_numel(specs_[i].shape)});
      }
      const int64_t first = seg.flat - layout_.offsets()[i];  // the piece's first element in the (TP-local) tensor
      const bool saves = mine && writes[i];
      auto add = [&](const char* kind, const Tensor& local) {
        regions.push_back({logical.name, logical.shape, kind, local, runs_within(tp_runs, first, seg.length), saves});
      };
      // Full buffers are indexed by the flat offset, shards by the piece's place in this rank's shard.
      if (policy_.full_params) add("param", buffers_.full_params.view(seg.flat, {seg.length}));
      else if (mine) add("param", buffers_.param_shard.view(seg.local, {seg.length}));
      if (!policy_.shard_optimizer) {
        add("adam_m", m.view(seg.flat, {seg.length}));
        add("adam_v", v.view(seg.flat, {seg.length}));
      } else if (mine) {
        add("adam_m", m.view(seg.local, {seg.length}));
        add("adam_v", v.view(seg.local, {seg.length}));
      }
    }
  }
  return regions;
}

}  // namespace tripod
