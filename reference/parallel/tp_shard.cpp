#include "parallel/tp_shard.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/host_memory.h"
#include "parallel/tp_group.h"
#include "parallel/tp_vocab.h"

namespace tripod::tp {
namespace {

int64_t row_width(const Shape& shape) { return shape.size() >= 2 ? shape_numel(shape) / shape[0] : 1; }

TpShard with_rank(const TpShard& shard, int rank) {
  TpShard other = shard;
  other.rank = rank;
  return other;
}

}  // namespace

std::string tp_split_name(TpSplit split) {
  switch (split) {
    case TpSplit::Replicated: return "replicated";
    case TpSplit::Rows: return "rows";
    case TpSplit::Columns: return "columns";
    case TpSplit::QkvRows: return "qkv-rows";
    case TpSplit::VocabRows: return "vocab-rows";
  }
  return "?";
}

TpSplit tp_split_of(ParamRole role) {
  switch (role) {
    case ParamRole::TokenEmbedding:
    case ParamRole::LmHead: return TpSplit::VocabRows;
    case ParamRole::QkvWeight:
    case ParamRole::QkvBias: return TpSplit::QkvRows;
    case ParamRole::FcWeight:
    case ParamRole::FcBias: return TpSplit::Rows;  // column-parallel: output features
    case ParamRole::AttnProjWeight:
    case ParamRole::FcProjWeight: return TpSplit::Columns;  // row-parallel: input features
    default: return TpSplit::Replicated;  // wpe, LayerNorms, row-parallel biases (added once, after the sum)
  }
}

TpShard tp_shard(const ParamSpec& spec, int size, int rank, int vocab_multiple) {
  check(size >= 1 && rank >= 0 && rank < size, "tensor parallel rank ", rank, " of size ", size, " is invalid");
  TpShard s{spec.name, tp_split_of(spec.role), spec.shape, spec.shape, size, rank, vocab_multiple};
  const auto divide = [&](std::size_t axis, int64_t parts, const char* how) {
    TRIPOD_CHECK(s.logical.size() > axis && s.logical[axis] % parts == 0, "cannot split ", spec.name, " ",
                 shape_str(s.logical), " ", how, " over tensor parallel size ", size, ": dimension ", axis,
                 " does not divide into ", parts, " equal parts");
    s.local[axis] = s.logical[axis] / size;
  };
  switch (s.split) {
    case TpSplit::Replicated: break;
    case TpSplit::Rows: divide(0, size, "by rows"); break;
    case TpSplit::Columns:
      TRIPOD_CHECK(s.logical.size() == 2, "cannot split ", spec.name, " ", shape_str(s.logical),
                   " by columns: not a matrix");
      divide(1, size, "by columns");
      break;
    case TpSplit::QkvRows: divide(0, 3 * static_cast<int64_t>(size), "by heads within the q, k and v blocks"); break;
    case TpSplit::VocabRows: s.local[0] = vocab_shard(s.logical[0], size, rank, vocab_multiple).rows; break;
  }
  return s;
}

std::vector<TpShard> tp_shards(const ModelConfig& config, int size, int rank) {
  validate_tensor_parallel(config, size);
  std::vector<TpShard> shards;
  for (const ParamSpec& spec : gpt_param_specs(config)) shards.push_back(tp_shard(spec, size, rank));
  return shards;
}

std::vector<ShardRun> shard_runs(const TpShard& s) {
  const int64_t width = row_width(s.logical);  // elements per row (1 for a vector)
  std::vector<ShardRun> runs;
  switch (s.split) {
    case TpSplit::Replicated: runs.push_back({0, 0, shape_numel(s.logical)}); break;
    case TpSplit::Rows: {  // one block of rows
      const int64_t rows = s.local[0];
      runs.push_back({0, s.rank * rows * width, rows * width});
      break;
    }
    case TpSplit::Columns: {  // a column block of every row
      const int64_t out = s.logical[0], in = s.logical[1], in_local = s.local[1];
      for (int64_t o = 0; o < out; ++o) runs.push_back({o * in_local, o * in + s.rank * in_local, in_local});
      break;
    }
    case TpSplit::QkvRows: {  // this rank's heads in each of the q, k, v row blocks
      const int64_t block = s.logical[0] / 3, rows = block / s.size;
      for (int64_t b = 0; b < 3; ++b)
        runs.push_back({b * rows * width, (b * block + s.rank * rows) * width, rows * width});
      break;
    }
    case TpSplit::VocabRows: {  // the real rows of a padded block; the rest is padding
      const int64_t rows = s.local[0], start = s.rank * rows;
      const int64_t valid = std::clamp<int64_t>(s.logical[0] - start, 0, rows);
      if (valid > 0) runs.push_back({0, start * width, valid * width});
      break;
    }
  }
  return runs;
}

int64_t logical_index(const TpShard& shard, int64_t local_index) {
  for (const ShardRun& run : shard_runs(shard))
    if (local_index >= run.local && local_index < run.local + run.length) return run.logical + local_index - run.local;
  return -1;
}

bool tp_replicated(const ParamSpec& spec) { return tp_split_of(spec.role) == TpSplit::Replicated; }

bool tp_grad_needs_allreduce(const ParamSpec& spec, bool sequence_parallel) {
  return sequence_parallel && tp_replicated(spec) && spec.role != ParamRole::PositionEmbedding;
}

void init_local_shard(const ParamSpec& spec, const TpShard& shard, uint64_t seed, double* out) {
  check(spec.name == shard.name && spec.shape == shard.logical, "init_local_shard: the shard of ", shard.name,
        " does not belong to parameter ", spec.name);
  std::fill(out, out + shape_numel(shard.local), 0.0);  // padding
  // initial_values depends only on (seed, name, logical element index), so each run of the
  // shard draws exactly the values the full tensor has there.
  for (const ShardRun& run : shard_runs(shard)) initial_values(spec, seed, run.logical, run.length, out + run.local);
}

std::vector<double> extract_shard(const TpShard& shard, const std::vector<double>& full) {
  TRIPOD_CHECK(static_cast<int64_t>(full.size()) == shape_numel(shard.logical), "extract_shard: ", shard.name, " ",
               shape_str(shard.logical), " needs ", shape_numel(shard.logical), " elements, got ", full.size());
  std::vector<double> local(static_cast<std::size_t>(shape_numel(shard.local)), 0.0);
  for (const ShardRun& run : shard_runs(shard))
    std::copy_n(full.begin() + run.logical, run.length, local.begin() + run.local);
  return local;
}

std::vector<double> assemble_full(Communicator& tp, const TpShard& shard, const std::vector<double>& local) {
  check(shard.size == tp.size() && shard.rank == tp.rank(), "assemble_full: the shard of ", shard.name, " is for rank ",
        shard.rank, " of ", shard.size, " but the group ", tp.name(), " has ", tp.size(), " ranks");
  const int64_t n = shape_numel(shard.local);
  TRIPOD_CHECK(static_cast<int64_t>(local.size()) == n, "assemble_full: ", shard.name, " shard ",
               shape_str(shard.local), " needs ", n, " elements, got ", local.size());
  std::vector<double> gathered(static_cast<std::size_t>(n * tp.size()));
  tp.all_gather(host_view(local), host_view(gathered));
  if (shard.split == TpSplit::Replicated) {
    // Every rank must hold the same values; a replica that drifted is a bug worth naming (every
    // rank sees the same gathered data, so every rank throws the same error).
    for (int r = 1; r < tp.size(); ++r)
      for (int64_t i = 0; i < n; ++i)
        check(gathered[static_cast<std::size_t>(r * n + i)] == gathered[static_cast<std::size_t>(i)],
              "assemble_full: replicated parameter ", shard.name, " differs between TP ranks 0 and ", r, " at element ",
              i, ": ", gathered[static_cast<std::size_t>(i)], " vs ", gathered[static_cast<std::size_t>(r * n + i)]);
    gathered.resize(static_cast<std::size_t>(n));
    return gathered;
  }
  std::vector<double> full(static_cast<std::size_t>(shape_numel(shard.logical)), 0.0);
  for (int r = 0; r < tp.size(); ++r)
    for (const ShardRun& run : shard_runs(with_rank(shard, r)))
      std::copy_n(gathered.begin() + r * n + run.local, run.length, full.begin() + run.logical);
  return full;
}

}  // namespace tripod::tp
