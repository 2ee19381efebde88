#include "parallel/zero_engine.h"

#include <cmath>

namespace tripod {

struct ZeroEngine::Pending {
  std::unique_ptr<CommRequest> request;
  int bucket = 0;
  bool done = false;
};

ZeroEngine::ZeroEngine(const std::vector<ParamSpec>& specs, int64_t n_layer, int stage, int64_t bucket_bytes,
                       Communicator& dp, Backend& backend, DType dtype, AdamWConfig adamw,
                       const TensorParallelShards* tp, const std::vector<int>& deferred_groups,
                       int64_t deferred_bucket_min_elements)
    : specs_(specs),
      groups_(gpt_param_groups(specs, n_layer)),
      stage_(stage),
      dp_(dp),
      backend_(backend),
      dtype_(dtype),
      adamw_(adamw),
      // Every stage uses the same buckets, so stages 1-3 shard identically (and agree bit for bit).
      layout_(specs, groups_, dp.size(), std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(dtype_size(dtype))),
              /*one_group_per_bucket=*/false, deferred_groups, deferred_bucket_min_elements) {
  check(stage >= 0 && stage <= 3, "ZeRO stage must be 0, 1, 2 or 3 (got ", stage, ")");
  if (tp && tp->comm && tp->comm->size() > 1) tp_ = std::make_unique<TensorParallelShards>(*tp);
  check(bucket_bytes > 0, "the gradient bucket size must be positive (got ", bucket_bytes, " bytes)");
  segments_ = layout_.segments(dp_.rank());
  const std::size_t n_buckets = layout_.buckets().size();
  bucket_tensors_.resize(n_buckets);
  for (std::size_t i = 0; i < specs_.size(); ++i)
    bucket_tensors_[static_cast<std::size_t>(layout_.bucket_of_group(groups_[i]))].push_back(i);
  if (stage_ <= 2) full_params_ = std::make_unique<ParamSet>(specs_, backend_, dtype_, layout_.offsets(), layout_.total());
  if (stage_ <= 1) full_grads_ = std::make_unique<ParamSet>(specs_, backend_, dtype_, layout_.offsets(), layout_.total());
  if (stage_ >= 1) grad_shard_ = backend_.alloc({layout_.shard_elements()}, dtype_);
  if (stage_ == 3) param_shard_ = backend_.alloc({layout_.shard_elements()}, dtype_);
  const int64_t moments = stage_ == 0 ? layout_.total() : layout_.shard_elements();
  m_ = backend_.alloc({moments}, dtype_);
  v_ = backend_.alloc({moments}, dtype_);
  gathered_params_.resize(n_buckets);
  bucket_grads_.resize(n_buckets);
  param_users_.assign(n_buckets, 0);
  groups_ready_.assign(n_buckets, 0);
  deferred_.assign(n_buckets, false);
  for (int group : deferred_groups) deferred_[static_cast<std::size_t>(layout_.bucket_of_group(group))] = true;
}

void ZeroEngine::reduce_deferred() {
  check(pending_.empty(), "ZeroEngine: deferred reductions started with others still in flight");
  for (std::size_t b = 0; b < deferred_.size(); ++b) {
    if (!deferred_[b]) continue;
    // Stages 2-3 kept the bucket's buffer across the micro-batches (it always exists after a backward).
    if (stage_ >= 2 && !bucket_grads_[b].defined()) acquire_grads(layout_.buckets()[b].groups.front());
    launch_reduction(static_cast<int>(b));
  }
  finish_backward();
}

ZeroEngine::~ZeroEngine() = default;

ZeroMemory ZeroEngine::memory() const {
  ZeroMemory m;
  m.params = stage_ == 3 ? param_shard_.bytes() : full_params_->flat().bytes();
  m.grads = (full_grads_ ? full_grads_->flat().bytes() : 0) + (grad_shard_.defined() ? grad_shard_.bytes() : 0);
  m.optimizer = m_.bytes() + v_.bytes();
  m.peak_transient = peak_transient_bytes_;
  return m;
}

void ZeroEngine::track_transient(std::ptrdiff_t delta) {
  transient_bytes_ = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(transient_bytes_) + delta);
  peak_transient_bytes_ = std::max(peak_transient_bytes_, transient_bytes_);
}

Tensor ZeroEngine::bucket_view(const Tensor& flat, int bucket) const {
  const Bucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  return flat.view(b.start, {b.size});
}

Tensor ZeroEngine::view_in_bucket(const Tensor& buffer, int bucket, std::size_t tensor) const {
  const int64_t start = layout_.buckets()[static_cast<std::size_t>(bucket)].start;
  return buffer.view(layout_.offsets()[tensor] - start, specs_[tensor].shape);
}

// This rank's shard of tensor i under tensor parallelism, from the logical initial values.
std::vector<double> ZeroEngine::local_initial(std::size_t i, uint64_t seed) const {
  std::vector<double> local(static_cast<std::size_t>(shape_numel(specs_[i].shape)));
  tp::init_local_shard(tp_->logical[i], tp_->shards[i], seed, local.data());
  return local;
}

void ZeroEngine::initialise(uint64_t seed) {
  if (stage_ <= 2) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (tp_) from_host_f64(backend_, local_initial(i, seed), full_params_->at(i));
      else fill_initial_values(backend_, specs_[i], seed, 0, full_params_->at(i));
    }
  } else {
    // ZeRO-3: each rank initialises only the pieces it owns (layout-independent initialisation).
    for (const auto& seg : segments_) {
      const Tensor dst = param_shard_.view(seg.local, {seg.length});
      const int64_t first = seg.flat - layout_.offsets()[seg.tensor];
      if (tp_) {
        const std::vector<double> local = local_initial(seg.tensor, seed);
        from_host_f64(backend_, std::vector<double>(local.begin() + first, local.begin() + first + seg.length), dst);
      } else {
        fill_initial_values(backend_, specs_[seg.tensor], seed, first, dst);
      }
    }
  }
  backend_.fill(m_, 0.0);
  backend_.fill(v_, 0.0);
}

void ZeroEngine::zero_grads() { backend_.fill(full_grads_ ? full_grads_->flat() : grad_shard_, 0.0); }

void ZeroEngine::begin_backward(bool reduce) {
  check(pending_.empty(), "ZeroEngine: a backward pass began with reductions still in flight");
  reduce_ = reduce || stage_ >= 2;
  std::fill(groups_ready_.begin(), groups_ready_.end(), 0);
}

const Tensor& ZeroEngine::transient_view(const std::string& key, const std::string& name, const char* what) const {
  auto it = tensor_views_.find(key);
  check(it != tensor_views_.end(), "ZeRO-", stage_, ": ", what, " of '", name, "' used outside acquire/release");
  return it->second;
}

const Tensor& ZeroEngine::param(const std::string& name) {
  if (full_params_) return (*full_params_)[name];
  return transient_view("p:" + name, name, "parameter");
}

const Tensor& ZeroEngine::grad(const std::string& name) {
  if (full_grads_) return (*full_grads_)[name];
  return transient_view("g:" + name, name, "gradient");
}

void ZeroEngine::acquire_params(int group) {
  progress();  // each hook is a chance for MPI to move the buckets in flight
  if (stage_ < 3) return;
  const int b = layout_.bucket_of_group(group);
  if (param_users_[static_cast<std::size_t>(b)]++ > 0) return;
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  Tensor buffer = backend_.alloc({bucket.size}, dtype_);
  track_transient(static_cast<std::ptrdiff_t>(buffer.bytes()));
  dp_.all_gather(param_shard_.view(layout_.shard_offset(b), {bucket.size / layout_.dp()}), buffer);
  for (std::size_t i : bucket_tensors_[static_cast<std::size_t>(b)])
    tensor_views_["p:" + specs_[i].name] = view_in_bucket(buffer, b, i);
  gathered_params_[static_cast<std::size_t>(b)] = buffer;
}

void ZeroEngine::release_params(int group) {
  if (stage_ < 3) return;
  const int b = layout_.bucket_of_group(group);
  if (--param_users_[static_cast<std::size_t>(b)] > 0) return;
  for (std::size_t i : bucket_tensors_[static_cast<std::size_t>(b)]) tensor_views_.erase("p:" + specs_[i].name);
  track_transient(-static_cast<std::ptrdiff_t>(gathered_params_[static_cast<std::size_t>(b)].bytes()));
  gathered_params_[static_cast<std::size_t>(b)] = Tensor();
  progress();
}

void ZeroEngine::acquire_grads(int group) {
  progress();
  if (stage_ < 2) return;
  const int b = layout_.bucket_of_group(group);
  if (bucket_grads_[static_cast<std::size_t>(b)].defined()) return;
  Tensor buffer = backend_.alloc({layout_.buckets()[static_cast<std::size_t>(b)].size}, dtype_);  // zeroed
  track_transient(static_cast<std::ptrdiff_t>(buffer.bytes()));
  for (std::size_t i : bucket_tensors_[static_cast<std::size_t>(b)])
    tensor_views_["g:" + specs_[i].name] = view_in_bucket(buffer, b, i);
  bucket_grads_[static_cast<std::size_t>(b)] = buffer;
}

void ZeroEngine::grads_ready(int group) {
  const int b = layout_.bucket_of_group(group);
  const std::size_t needed = layout_.buckets()[static_cast<std::size_t>(b)].groups.size();
  if (static_cast<std::size_t>(++groups_ready_[static_cast<std::size_t>(b)]) == needed && reduce_ &&
      !deferred_[static_cast<std::size_t>(b)])
    launch_reduction(b);
  progress();
}

void ZeroEngine::launch_reduction(int b) {
  auto pending = std::make_unique<Pending>();
  pending->bucket = b;
  const int64_t slice = layout_.buckets()[static_cast<std::size_t>(b)].size / layout_.dp();
  if (b == skip_bucket_) {  // injected fault: this rank's own gradients stand in for the reduction
    if (stage_ == 1)
      backend_.copy(bucket_view(full_grads_->flat(), b).view(dp_.rank() * slice, {slice}),
                    grad_shard_.view(layout_.shard_offset(b), {slice}));
    pending->request = std::make_unique<CompletedRequest>();
  } else if (stage_ == 0) {
    const Tensor grads = bucket_view(full_grads_->flat(), b);
    pending->request = dp_.all_reduce_async(grads, grads, ReduceOp::Sum);
  } else if (stage_ == 1) {
    pending->request = dp_.reduce_scatter_async(bucket_view(full_grads_->flat(), b),
                                                grad_shard_.view(layout_.shard_offset(b), {slice}), ReduceOp::Sum);
  } else {  // in place into this rank's block of the bucket buffer; accumulated into the shard on completion
    const Tensor& buffer = bucket_grads_[static_cast<std::size_t>(b)];
    pending->request = dp_.reduce_scatter_async(buffer, buffer.view(dp_.rank() * slice, {slice}), ReduceOp::Sum);
  }
  pending_.push_back(std::move(pending));
}

void ZeroEngine::complete(Pending& p) {
  if (p.done) return;
  p.done = true;
  if (stage_ < 2) return;
  const std::size_t b = static_cast<std::size_t>(p.bucket);
  const int64_t slice = layout_.buckets()[b].size / layout_.dp();
  backend_.add_inplace(grad_shard_.view(layout_.shard_offset(p.bucket), {slice}),
                       bucket_grads_[b].view(dp_.rank() * slice, {slice}));
  for (std::size_t i : bucket_tensors_[b]) tensor_views_.erase("g:" + specs_[i].name);
  track_transient(-static_cast<std::ptrdiff_t>(bucket_grads_[b].bytes()));
  bucket_grads_[b] = Tensor();
}

void ZeroEngine::progress() {
  for (auto& p : pending_)
    if (!p->done && p->request->test()) complete(*p);
}

void ZeroEngine::finish_backward() {
  for (auto& p : pending_) {
    p->request->wait();
    complete(*p);
  }
  pending_.clear();
}

Tensor ZeroEngine::grad_sum_squares(const std::set<std::string>& excluded) {
  // Every stage sums the squares of this rank's pieces of its slices (in flat order), then across
  // the DP ranks, so the norm (and the clipping it drives) is bit-identical between stages given
  // identical gradients. Under TP the sums of the TP ranks are added too, with the tensors that
  // every TP rank holds whole (LayerNorms, row-parallel biases, wpe) counted on TP rank 0 only.
  Tensor sum = alloc_scalar(backend_);  // stays on the device; the step reads it back once
  for (const auto& seg : segments_) {
    if (tp_ && tp_->comm->rank() != 0 && tp::tp_replicated(specs_[seg.tensor].name)) continue;
    if (excluded.count(specs_[seg.tensor].name)) continue;
    backend_.sum_squares(sum, grad_piece(seg));
  }
  dp_.all_reduce(sum, sum, ReduceOp::Sum);
  if (tp_) tp_->comm->all_reduce(sum, sum, ReduceOp::Sum);
  return sum;
}

Tensor ZeroEngine::grad_piece(const ShardLayout::Segment& seg) const {
  return full_grads_ && stage_ == 0 ? full_grads_->flat().view(seg.flat, {seg.length})
                                    : grad_shard_.view(seg.local, {seg.length});
}

std::vector<std::string> ZeroEngine::nonfinite_grads() {
  Tensor counts = backend_.alloc({static_cast<int64_t>(specs_.size())}, DType::F64);
  for (const auto& seg : segments_) backend_.count_nonfinite(counts.view(static_cast<int64_t>(seg.tensor), {1}), grad_piece(seg));
  const std::vector<double> host = to_host_f64(backend_, counts);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (host[i] > 0) names.push_back(specs_[i].name);
  return names;
}

void ZeroEngine::all_reduce_partial_tp_grads() {
  if (!tp_) return;
  auto partial = [&](std::size_t i) { return tp::tp_grad_needs_allreduce(specs_[i].name, /*sequence_parallel=*/true); };
  if (full_grads_ && stage_ == 0) {
    for (std::size_t i = 0; i < specs_.size(); ++i)
      if (partial(i)) tp_->comm->all_reduce(full_grads_->at(i), full_grads_->at(i), ReduceOp::Sum);
    return;
  }
  for (const auto& seg : segments_) {
    if (!partial(seg.tensor)) continue;
    const Tensor mine = grad_shard_.view(seg.local, {seg.length});
    tp_->comm->all_reduce(mine, mine, ReduceOp::Sum);
  }
}

void ZeroEngine::optimizer_step(double lr, int64_t step, double grad_scale) {
  auto decay_of = [&](std::size_t i) { return decays(specs_[i], adamw_.decay_policy) ? adamw_.weight_decay : 0.0; };
  if (stage_ == 0) {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const int64_t at = layout_.offsets()[i], n = shape_numel(specs_[i].shape);
      backend_.adamw(full_params_->at(i), full_grads_->at(i), m_.view(at, {n}), v_.view(at, {n}), lr, adamw_.beta1,
                     adamw_.beta2, adamw_.eps, decay_of(i), step, grad_scale);
    }
    return;
  }
  for (const auto& seg : segments_) {
    const Tensor param = stage_ == 3 ? param_shard_.view(seg.local, {seg.length})
                                     : full_params_->flat().view(seg.flat, {seg.length});
    backend_.adamw(param, grad_shard_.view(seg.local, {seg.length}), m_.view(seg.local, {seg.length}),
                   v_.view(seg.local, {seg.length}), lr, adamw_.beta1, adamw_.beta2, adamw_.eps, decay_of(seg.tensor),
                   step, grad_scale);
  }
  if (stage_ == 3) return;
  // Stages 1-2: every rank updated its slices; gather the whole parameters back, in place.
  std::vector<std::unique_ptr<CommRequest>> gathers;
  for (int b = 0; b < static_cast<int>(layout_.buckets().size()); ++b) {
    const Tensor bucket = bucket_view(full_params_->flat(), b);
    const int64_t slice = layout_.buckets()[static_cast<std::size_t>(b)].size / layout_.dp();
    gathers.push_back(dp_.all_gather_async(bucket.view(dp_.rank() * slice, {slice}), bucket));
  }
  for (auto& g : gathers) g->wait();
}

std::vector<std::vector<double>> ZeroEngine::gather_params() {
  std::vector<std::vector<double>> out(specs_.size());
  for (std::size_t b = 0; b < layout_.buckets().size(); ++b) {
    Tensor buffer;
    if (stage_ == 3) {
      buffer = backend_.alloc({layout_.buckets()[b].size}, dtype_);
      dp_.all_gather(param_shard_.view(layout_.shard_offset(static_cast<int>(b)), {layout_.buckets()[b].size / layout_.dp()}),
                     buffer);
    }
    for (std::size_t i : bucket_tensors_[b])
      out[i] = to_host_f64(backend_, stage_ == 3 ? view_in_bucket(buffer, static_cast<int>(b), i) : full_params_->at(i));
  }
  if (tp_)  // assemble the logical tensors from the TP shards, in spec order on every rank
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = tp::assemble_full(*tp_->comm, tp_->shards[i], out[i]);
  return out;
}

}  // namespace tripod
