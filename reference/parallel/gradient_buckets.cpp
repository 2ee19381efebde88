#include "parallel/gradient_buckets.h"

#include <algorithm>
#include <limits>

#include "core/host_memory.h"

namespace tripod {

struct GradientBuckets::Pending {
  std::unique_ptr<CommRequest> request;
  int bucket = 0;
  bool done = false;
  bool zero = false;  // launch_zero: nothing was sent, and nothing is to be added
  // A split bucket's second part: the packed rows or tensors, where they go (pieces added one by
  // one, and rows scattered by id), and the first part, which must have arrived before this one is
  // added to it.
  Tensor packed;
  std::vector<Piece> pieces;
  struct RowScatter {
    Tensor ids;                // int32 [count], on the backend, relative to table_start
    int64_t first_packed_row = 0, count = 0;
    int64_t table_start = 0;   // bucket element of the table's row 0
    int64_t table_rows = 0, channels = 0;
  } scatter;
  const Pending* after = nullptr;
};

struct GradientBuckets::Split {
  int bucket = 0;
  std::size_t sparse = 0;
  // This rank's rows of the sparse tensor, padded with -1 to the same length on every DP rank, and
  // every rank's, gathered while backward goes on.
  std::vector<double> rows, every_rank_rows;
  std::unique_ptr<CommRequest> rows_gathered;
  Tensor rest;                // [bucket size], zeroed: what the rest of backward adds
  std::vector<Tensor> views;  // per tensor of the model, into `rest` (undefined for other buckets)
  const Pending* first = nullptr;
};

GradientBuckets::GradientBuckets(const ShardLayout& layout, const std::vector<ParamSpec>& specs,
                                 const ZeroPolicy& policy, Communicator& dp, Backend& backend, DType dtype,
                                 Tensor full_grads, Tensor grad_shard, TransientMemory& memory, const FaultPlan& faults)
    : layout_(layout),
      specs_(specs),
      policy_(policy),
      dp_(dp),
      backend_(backend),
      dtype_(dtype),
      full_grads_(std::move(full_grads)),
      grad_shard_(std::move(grad_shard)),
      memory_(memory),
      faults_(faults),
      buffers_(layout.buckets().size()),
      views_(specs.size()),
      groups_ready_(layout.buckets().size(), 0),
      deferred_(layout.buckets().size(), false),
      splittable_(layout.buckets().size(), false) {}

GradientBuckets::~GradientBuckets() = default;

Tensor GradientBuckets::bucket_of(const Tensor& flat, int bucket) const {
  const Bucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  return flat.view(b.start, {b.size});
}

void GradientBuckets::begin_backward(bool reduce) {
  check(pending_.empty(), "ZeroEngine: a backward pass began with reductions still in flight");
  check(!split_, "ZeroEngine: a backward pass began before the previous one's split bucket was ready");
  reduce_ = reduce || policy_.reduce_every_microbatch;
  std::fill(groups_ready_.begin(), groups_ready_.end(), 0);
}

void GradientBuckets::acquire(int group) {
  progress();
  if (policy_.full_grads) return;
  const int b = layout_.bucket_of_group(group);
  if (buffers_[static_cast<std::size_t>(b)].defined()) return;
  if (split_ && split_->bucket == b) return;  // its writes go to the split's buffer (redirected)
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  Tensor buffer = backend_.alloc({bucket.size}, dtype_);  // zeroed
  memory_.add(static_cast<std::ptrdiff_t>(buffer.bytes()));
  for (std::size_t i : bucket.tensors) views_[i] = buffer.view(layout_.offsets()[i] - bucket.start, specs_[i].shape);
  buffers_[static_cast<std::size_t>(b)] = buffer;
}

const Tensor& GradientBuckets::view(std::size_t tensor) const {
  if (!views_[tensor].defined())
    fail("ZeRO-", policy_.stage, ": gradient of '", specs_[tensor].name, "' used outside acquire/release");
  return views_[tensor];
}

void GradientBuckets::ready(int group) {
  const int b = layout_.bucket_of_group(group);
  const std::size_t needed = layout_.buckets()[static_cast<std::size_t>(b)].groups.size();
  if (static_cast<std::size_t>(++groups_ready_[static_cast<std::size_t>(b)]) == needed && reduce_ &&
      !deferred_[static_cast<std::size_t>(b)]) {
    if (split_ && split_->bucket == b) launch_rest();
    else launch(b);
  }
  progress();
}

void GradientBuckets::allow_split(int bucket) {
  const Bucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  check(b.groups.size() == 1, "ZeroEngine: bucket ", bucket, " holds ", b.groups.size(),
        " parameter groups; only a group's own bucket can be reduced in two parts");
  splittable_[static_cast<std::size_t>(bucket)] = true;
}

bool GradientBuckets::splits(int group) const {
  if (!layout_.holds_group(group) || !reduce_ || dp_.size() == 1) return false;
  const std::size_t b = static_cast<std::size_t>(layout_.bucket_of_group(group));
  return splittable_[b] && !deferred_[b];
}

void GradientBuckets::ready_except_rows(int group, std::size_t sparse, const std::vector<int64_t>& rows,
                                        int64_t most_rows, bool first_part_zero) {
  check(splits(group), "ZeroEngine: group ", group, "'s gradient bucket cannot be reduced in two parts now");
  check(!split_, "ZeroEngine: a second bucket split before the first was ready");
  const int b = layout_.bucket_of_group(group);
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  check(std::find(bucket.tensors.begin(), bucket.tensors.end(), sparse) != bucket.tensors.end(),
        "ZeroEngine: '", specs_[sparse].name, "' is not in group ", group, "'s bucket");
  const int64_t row_count = specs_[sparse].shape.at(0);
  for (int64_t r : rows)
    check(r >= 0 && r < row_count, "ZeroEngine: row ", r, " of '", specs_[sparse].name, "' is outside its ",
          row_count, " rows");
  check(static_cast<int64_t>(rows.size()) <= most_rows, "ZeroEngine: ", rows.size(), " rows, more than the ",
        most_rows, " every rank was to send at most");
  if (first_part_zero) {
    check(policy_.full_grads || !buffers_[static_cast<std::size_t>(b)].defined(), "ZeroEngine: group ", group,
          "'s gradient bucket was written before its split, so its first part is not zero");
    launch_zero(b);
  } else {
    launch(b);  // the part that is final now
  }
  last_split_first_elements_ = first_part_zero ? 0 : bucket.size;
  auto split = std::make_unique<Split>();
  split->bucket = b;
  split->sparse = sparse;
  split->rows.assign(static_cast<std::size_t>(most_rows), -1.0);
  std::copy(rows.begin(), rows.end(), split->rows.begin());
  split->every_rank_rows.resize(split->rows.size() * static_cast<std::size_t>(dp_.size()));
  split->rows_gathered = dp_.all_gather_async(host_view(split->rows), host_view(split->every_rank_rows));
  split->first = pending_.back().get();
  split->rest = backend_.alloc({bucket.size}, dtype_);  // zeroed
  memory_.add(static_cast<std::ptrdiff_t>(split->rest.bytes()));
  split->views.resize(specs_.size());
  for (std::size_t i : bucket.tensors)
    split->views[i] = split->rest.view(layout_.offsets()[i] - bucket.start, specs_[i].shape);
  split_ = std::move(split);
}

const Tensor* GradientBuckets::redirected(std::size_t tensor) const {
  return split_ && split_->views[tensor].defined() ? &split_->views[tensor] : nullptr;
}

// Every DP rank's rows, merged: sorted, each once (the padding left out).
static std::vector<int64_t> union_of_rows(const std::vector<double>& every_rank_rows) {
  std::vector<int64_t> all;
  for (double r : every_rank_rows)
    if (r >= 0) all.push_back(static_cast<int64_t>(r));
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

GradientBuckets::HeldWindow GradientBuckets::held_window(int b) const {
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(b)];
  if (!policy_.reduce_scatter) return {full_grads_, bucket.start, 0, bucket.size};
  const int64_t slice = bucket.size / layout_.dp(), begin = dp_.rank() * slice;
  return {grad_shard_, layout_.shard_offset(b) - begin, begin, begin + slice};
}

void GradientBuckets::launch_rest() {
  const std::unique_ptr<Split> split = std::move(split_);
  const Bucket& bucket = layout_.buckets()[static_cast<std::size_t>(split->bucket)];
  split->rows_gathered->wait();
  split->rows_gathered.reset();
  const std::vector<int64_t> union_rows = union_of_rows(split->every_rank_rows);
  const HeldWindow held = held_window(split->bucket);
  const std::size_t sparse = split->sparse;
  const int64_t sparse_at = layout_.offsets()[sparse] - bucket.start;
  const int64_t table_rows = specs_[sparse].shape.at(0), channels = shape_numel(specs_[sparse].shape) / table_rows;
  auto start = [&](Tensor packed, std::vector<Piece> pieces) {
    auto pending = std::make_unique<Pending>();
    pending->bucket = split->bucket;
    pending->after = split->first;
    memory_.add(static_cast<std::ptrdiff_t>(packed.bytes()));
    last_split_elements_ += packed.numel();
    pending->request = dp_.all_reduce_async(packed, packed, ReduceOp::Sum);
    pending->packed = std::move(packed);
    pending->pieces = std::move(pieces);
    pending_.push_back(std::move(pending));
    return pending_.back().get();
  };
  last_split_elements_ = 0;
  // The union's rows of the sparse tensor, gathered in one call. Apart from the other tensors,
  // because the rows differ between tensor-parallel ranks (each has its vocabulary shard's) while a
  // replicated tensor (wpe) must be summed by the same calls on the same sizes on every TP rank to
  // stay bit-identical there.
  if (!union_rows.empty()) {
    const auto count = static_cast<int64_t>(union_rows.size());
    Tensor packed = backend_.alloc({count, channels}, dtype_);
    const Tensor table = split->rest.view(sparse_at, {table_rows, channels});
    const Tensor all_ids = upload_rows(union_rows, 0, count, 0);
    backend_.gather_rows(packed, table, all_ids);
    // Where they go: rows wholly inside what this rank holds are scattered by id in one call, the
    // (at most two) rows that straddle its edges added piece by piece.
    const int64_t first_row = std::clamp<int64_t>((held.begin - sparse_at + channels - 1) / channels, 0, table_rows);
    const int64_t end_row = std::clamp<int64_t>((held.end - sparse_at) / channels, first_row, table_rows);
    const auto i0 = std::lower_bound(union_rows.begin(), union_rows.end(), first_row) - union_rows.begin();
    const auto i1 = std::lower_bound(union_rows.begin(), union_rows.end(), end_row) - union_rows.begin();
    std::vector<Piece> straddling;
    for (int64_t i : {i0 - 1, i1})
      if (i >= 0 && i < count) straddling.push_back({sparse_at + union_rows[i] * channels, i * channels, channels});
    Pending* pending = start(std::move(packed), std::move(straddling));
    if (i1 > i0)
      pending->scatter = {i1 - i0 == count && first_row == 0 ? all_ids : upload_rows(union_rows, i0, i1, first_row),
                          i0, i1 - i0, sparse_at + first_row * channels, end_row - first_row, channels};
  }
  // The bucket's other tensors, whole.
  std::vector<Piece> whole;
  int64_t whole_size = 0;
  for (std::size_t i : bucket.tensors)
    if (i != sparse) {
      const int64_t numel = shape_numel(specs_[i].shape);
      whole.push_back({layout_.offsets()[i] - bucket.start, whole_size, numel});
      whole_size += numel;
    }
  if (whole_size > 0) {
    Tensor packed = backend_.alloc({whole_size}, dtype_);
    for (const Piece& p : whole)
      backend_.copy(split->rest.view(p.in_bucket, {p.length}), packed.view(p.packed, {p.length}));
    start(std::move(packed), std::move(whole));
  }
  if (faults_.poison_released()) backend_.fill(split->rest, std::numeric_limits<double>::quiet_NaN());
  memory_.add(-static_cast<std::ptrdiff_t>(split->rest.bytes()));
}

// rows[begin, end) - first as int32 ids on the backend.
Tensor GradientBuckets::upload_rows(const std::vector<int64_t>& rows, int64_t begin, int64_t end, int64_t first) {
  std::vector<int32_t> ids;
  for (int64_t i = begin; i < end; ++i) ids.push_back(static_cast<int32_t>(rows[static_cast<std::size_t>(i)] - first));
  Tensor t = backend_.alloc({end - begin}, DType::I32);
  backend_.upload(ids.data(), t);
  return t;
}

void GradientBuckets::launch(int b) {
  auto pending = std::make_unique<Pending>();
  pending->bucket = b;
  const int64_t slice = layout_.buckets()[static_cast<std::size_t>(b)].size / layout_.dp();
  if (b == 0 && faults_.has(Fault::SkipGradReduction)) {  // this rank's own gradients stand in for the sum
    if (policy_.full_grads && policy_.reduce_scatter)
      backend_.copy(bucket_of(full_grads_, b).view(dp_.rank() * slice, {slice}),
                    grad_shard_.view(layout_.shard_offset(b), {slice}));
    pending->request = std::make_unique<CompletedRequest>();
  } else if (!policy_.reduce_scatter) {
    const Tensor grads = bucket_of(full_grads_, b);
    pending->request = dp_.all_reduce_async(grads, grads, ReduceOp::Sum);
  } else if (policy_.full_grads) {
    pending->request = dp_.reduce_scatter_async(bucket_of(full_grads_, b),
                                                grad_shard_.view(layout_.shard_offset(b), {slice}), ReduceOp::Sum);
  } else {  // in place into this rank's block of the bucket buffer; accumulated into the shard on completion
    const Tensor& buffer = buffers_[static_cast<std::size_t>(b)];
    pending->request = dp_.reduce_scatter_async(buffer, buffer.view(dp_.rank() * slice, {slice}), ReduceOp::Sum);
  }
  pending_.push_back(std::move(pending));
}

// Every rank's bucket holds zeros, so their sum is zero: where the reduction would overwrite this
// rank's reduced values (the shard slice of stage 1) they are zeroed; the full gradients (stages
// 0-1) already hold zeros, and stages 2-3 add the sum into the shard, which adding zero leaves as it is.
void GradientBuckets::launch_zero(int b) {
  auto pending = std::make_unique<Pending>();
  pending->bucket = b;
  pending->zero = true;
  if (policy_.full_grads && policy_.reduce_scatter) {
    const int64_t slice = layout_.buckets()[static_cast<std::size_t>(b)].size / layout_.dp();
    backend_.fill(grad_shard_.view(layout_.shard_offset(b), {slice}), 0.0);
  }
  pending->request = std::make_unique<CompletedRequest>();
  pending_.push_back(std::move(pending));
}

void GradientBuckets::complete(Pending& p) {
  if (p.done) return;
  if (p.zero) {
    p.done = true;
    p.request.reset();
    return;
  }
  if (p.after) {
    complete_rest(p);
    return;
  }
  p.done = true;
  // A request holds its tensors (so that they outlive the transfer): a finished one must let go,
  // or the bucket buffer freed below stays allocated until the whole backward is over.
  p.request.reset();
  if (policy_.full_grads) return;
  const std::size_t b = static_cast<std::size_t>(p.bucket);
  const Bucket& bucket = layout_.buckets()[b];
  const int64_t slice = bucket.size / layout_.dp();
  backend_.add_inplace(grad_shard_.view(layout_.shard_offset(p.bucket), {slice}),
                       buffers_[b].view(dp_.rank() * slice, {slice}));
  for (std::size_t i : bucket.tensors) views_[i] = Tensor();
  if (faults_.poison_released()) backend_.fill(buffers_[b], std::numeric_limits<double>::quiet_NaN());
  memory_.add(-static_cast<std::ptrdiff_t>(buffers_[b].bytes()));
  buffers_[b] = Tensor();
}

// Adds a split bucket's reduced second part to the first, where this rank holds it: the whole
// bucket (stage 0) or this rank's slice of it, in the gradient shard (1-3).
void GradientBuckets::complete_rest(Pending& p) {
  p.done = true;
  p.request.reset();
  const HeldWindow held = held_window(p.bucket);
  for (const Piece& piece : p.pieces) {
    const int64_t begin = std::max(piece.in_bucket, held.begin);
    const int64_t end = std::min(piece.in_bucket + piece.length, held.end);
    if (begin < end)
      backend_.add_inplace(held.target.view(held.base + begin, {end - begin}),
                           p.packed.view(piece.packed + begin - piece.in_bucket, {end - begin}));
  }
  const Pending::RowScatter& s = p.scatter;
  if (s.count > 0)
    backend_.scatter_add_rows(held.target.view(held.base + s.table_start, {s.table_rows, s.channels}),
                              p.packed.view(s.first_packed_row * s.channels, {s.count, s.channels}), s.ids);
  if (faults_.poison_released()) backend_.fill(p.packed, std::numeric_limits<double>::quiet_NaN());
  memory_.add(-static_cast<std::ptrdiff_t>(p.packed.bytes()));
  p.packed = Tensor();
  p.scatter.ids = Tensor();
}

void GradientBuckets::progress() {
  // A split bucket's second part is added to its first, so it waits for the first to complete.
  for (auto& p : pending_)
    if (!p->done && (!p->after || p->after->done) && p->request->test()) complete(*p);
}

void GradientBuckets::finish() {
  for (auto& p : pending_) {
    if (p->done) continue;
    p->request->wait();
    complete(*p);
  }
  pending_.clear();
}

void GradientBuckets::reduce_deferred() {
  check(pending_.empty(), "ZeroEngine: deferred reductions started with others still in flight");
  for (std::size_t b = 0; b < deferred_.size(); ++b) {
    if (!deferred_[b]) continue;
    // Stages 2-3 kept the bucket's buffer across the micro-batches (it always exists after a backward).
    if (!policy_.full_grads && !buffers_[b].defined()) acquire(layout_.buckets()[b].groups.front());
    launch(static_cast<int>(b));
  }
  finish();
}

}  // namespace tripod
