#include "parallel/shard_layout.h"

#include <algorithm>

#include "core/error.h"

namespace tripod {

ShardLayout::ShardLayout(const std::vector<ParamSpec>& specs, const std::vector<int>& groups, int dp,
                         int64_t bucket_elements, bool one_group_per_bucket, const std::vector<int>& own_bucket_groups,
                         int64_t own_bucket_min_elements, const std::vector<bool>& operand_only)
    : dp_(dp) {
  check(dp >= 1, "data-parallel size must be >= 1 (got ", dp, ")");
  check(bucket_elements >= 1, "gradient bucket size must be positive (got ", bucket_elements, " elements)");
  check(groups.size() == specs.size(), "ShardLayout: a group for every tensor");
  check(operand_only.empty() || operand_only.size() == specs.size(), "ShardLayout: ", operand_only.size(),
        " operand-only flags for ", specs.size(), " tensors");
  auto last_in_bucket = [&](std::size_t i) { return !operand_only.empty() && operand_only[i]; };
  const int n_groups = groups.empty() ? 0 : *std::max_element(groups.begin(), groups.end()) + 1;
  std::vector<int64_t> group_elements(static_cast<std::size_t>(n_groups), 0);
  std::vector<bool> present(static_cast<std::size_t>(n_groups), false);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    present[static_cast<std::size_t>(groups[i])] = true;
    check(i == 0 || groups[i] >= groups[i - 1], "parameter groups must be contiguous in spec order");
    sizes_.push_back(shape_numel(specs[i].shape));
    group_elements[static_cast<std::size_t>(groups[i])] += sizes_.back();
  }

  // Buckets in backward order: from the last group down, closing a bucket once it is big enough.
  bucket_of_group_.assign(static_cast<std::size_t>(n_groups), -1);
  // A pipeline stage holds only some groups (its blocks; the embeddings and head on the first and
  // last stage): the others get no bucket (bucket_of_group is -1).
  auto alone = [&](int g) {
    return std::find(own_bucket_groups.begin(), own_bucket_groups.end(), g) != own_bucket_groups.end();
  };
  for (int g = n_groups - 1; g >= 0; --g) {
    if (!present[static_cast<std::size_t>(g)]) continue;
    if (buckets_.empty() || one_group_per_bucket || buckets_.back().used >= bucket_elements || alone(g) ||
        alone(buckets_.back().groups.back()))
      buckets_.emplace_back();
    buckets_.back().groups.push_back(g);
    buckets_.back().used += group_elements[static_cast<std::size_t>(g)];
    bucket_of_group_[static_cast<std::size_t>(g)] = static_cast<int>(buckets_.size()) - 1;
  }
  // Flat placement in spec order (the first group's bucket first), each bucket padded to n slices.
  offsets_.assign(specs.size(), 0);
  int64_t cursor = 0;
  for (auto b = buckets_.rbegin(); b != buckets_.rend(); ++b) {
    b->start = cursor;
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (std::find(b->groups.begin(), b->groups.end(), groups[i]) != b->groups.end()) b->tensors.push_back(i);
    int64_t inside = 0;
    for (bool operand_part : {false, true}) {  // the exact tensors first, then the operand-only ones
      if (operand_part) b->exact = inside;
      for (std::size_t i : b->tensors)
        if (last_in_bucket(i) == operand_part) {
          // An operand-only tensor starts 16 elements aligned in the bucket: gathered as bf16 it is
          // a GEMM operand in place, and a device's tensor-core GEMMs want 16-byte aligned operands.
          if (operand_part) inside = (inside + kAlignElements - 1) / kAlignElements * kAlignElements;
          offsets_[i] = cursor + inside;
          inside += sizes_[i];
        }
    }
    // Padded to n slices of a multiple of 16 elements, so every bucket and every slice starts 64-byte
    // aligned in any buffer: kernels then see the same alignment whether a tensor lives in the full
    // buffer or in a gathered copy (vectorised loops peel by alignment), keeping stages bit-identical.
    // `inside` is the tensors' extent, with the gaps that aligned the operand-only ones.
    b->end = inside;
    const int64_t quantum = static_cast<int64_t>(dp) * kAlignElements;
    const int64_t least = alone(b->groups.front()) ? std::max(inside, own_bucket_min_elements) : inside;
    b->size = (least + quantum - 1) / quantum * quantum;
    cursor += b->size;
  }
  total_ = cursor;
  int64_t local = 0;
  shard_offsets_.assign(buckets_.size(), 0);
  for (std::size_t b = buckets_.size(); b-- > 0;) {  // shard order follows flat order
    shard_offsets_[b] = local;
    local += buckets_[b].size / dp;
  }
}

int ShardLayout::bucket_of_group(int group) const {
  check(holds_group(group), "parameter group ", group, " is not held by this shard layout (another pipeline stage's)");
  return bucket_of_group_[static_cast<std::size_t>(group)];
}

int64_t ShardLayout::slice_start(int bucket, int rank) const {
  const Bucket& b = buckets_[static_cast<std::size_t>(bucket)];
  return b.start + static_cast<int64_t>(rank) * (b.size / dp_);
}

std::vector<ShardLayout::Segment> ShardLayout::segments(int rank) const {
  std::vector<Segment> out;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const int64_t lo = slice_start(static_cast<int>(b), rank), hi = lo + buckets_[b].size / dp_;
    for (std::size_t i = 0; i < offsets_.size(); ++i) {
      const int64_t begin = std::max(lo, offsets_[i]), end = std::min(hi, offsets_[i] + sizes_[i]);
      if (begin < end) out.push_back({i, begin, shard_offsets_[b] + (begin - lo), end - begin, static_cast<int>(b)});
    }
  }
  std::sort(out.begin(), out.end(), [](const Segment& a, const Segment& b) { return a.flat < b.flat; });
  return out;
}

}  // namespace tripod
