// How each logical GPT parameter (model/param_spec.h) is split over a tensor-parallel group, and
// the maps between a rank's local shard and the logical tensor: layout-independent initialisation
// of a shard, extraction of a shard from a full tensor, and assembly of the full tensor from every
// rank's shard.
//
//   split      parameters                                   local shape (tp = group size)
//   Replicated wpe, ln_1/ln_2/ln_f weight+bias,             the logical shape, the same on every rank
//              attn.c_proj.bias, mlp.c_proj.bias (row-parallel biases are added once, after the sum)
//   Rows       mlp.c_fc.weight [F,C], mlp.c_fc.bias [F]     [F/tp, C], [F/tp] (column-parallel)
//   Columns    attn.c_proj.weight [C,C], mlp.c_proj.weight [C,F]   [C, C/tp], [C, F/tp] (row-parallel)
//   QkvRows    attn.c_attn.weight [3C,C], attn.c_attn.bias [3C]     [3C/tp, C], [3C/tp]: rank r's heads
//              in each of the q, k, v blocks, so the local qkv activation is q|k|v of its heads
//   VocabRows  wte.weight, lm_head.weight [V,C]             [ceil(V/tp), C], rounded up to a multiple of
//              the layout's vocabulary padding; rank r holds padded rows [r*rows, (r+1)*rows), rows >= V
//              are padding (zero, no logical element; tp_vocab.h)
//
// Every rank's shard has the same local shape, so shards all-gather in equal blocks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/param_spec.h"

namespace tripod::tp {

enum class TpSplit { Replicated, Rows, Columns, QkvRows, VocabRows };
std::string tp_split_name(TpSplit split);  // "replicated", "rows", ...

// Which split a logical parameter has, by its role.
TpSplit tp_split_of(ParamRole role);

struct TpShard {
  std::string name;
  TpSplit split = TpSplit::Replicated;
  Shape logical;  // the full tensor's shape
  Shape local;    // this rank's shard, the same on every rank
  int size = 1;   // TP group size
  int rank = 0;   // TP rank the shard belongs to
  int vocab_multiple = 1;  // VocabRows: the local rows are a multiple of it (tp_vocab.h)
};

// The shard of `spec` on `tp_rank` of `tp_size`; throws (the same message on every rank) when the
// split dimension does not divide. The head alignment of QkvRows needs the model config: see
// tp_shards, or call validate_tensor_parallel first.
// `vocab_multiple` pads the vocabulary rows of each rank up to a multiple of it.
TpShard tp_shard(const ParamSpec& spec, int tp_size, int tp_rank, int vocab_multiple = 1);
// All of a model's shards on one rank, in spec order, after validate_tensor_parallel.
std::vector<TpShard> tp_shards(const ModelConfig& config, int tp_size, int tp_rank);

// A contiguous run of elements: local [local, local+length) holds logical [logical, logical+length),
// both flattened row-major. Local elements in no run are padding.
struct ShardRun {
  int64_t local = 0, logical = 0, length = 0;
};
std::vector<ShardRun> shard_runs(const TpShard& shard);
// The logical element a local element holds, or -1 for padding (one element at a time; for tests
// and error messages — bulk work goes through shard_runs).
int64_t logical_index(const TpShard& shard, int64_t local_index);

// Replicated across TP: every rank holds (and updates) the whole tensor. Gradient-norm accounting
// counts these once per TP group, not once per rank.
bool tp_replicated(const ParamSpec& spec);
// Whether the accumulated gradient must be summed over the TP group before the optimizer step.
// Without SP every replicated gradient is computed from replicated activations and is complete
// (and identical) on every rank. With SP the LayerNorms and row-parallel biases see only this
// rank's tokens, so their gradients are partial sums; wpe is the exception, because the
// vocab-parallel embedding backward computes its gradient from the gathered output gradient
// (tp_vocab.h). Sharded parameters never need it.
bool tp_grad_needs_allreduce(const ParamSpec& spec, bool sequence_parallel);

// Writes the local shard's initial values (local numel elements; padding 0): equal, bit for bit,
// to the matching elements of initial_values over the full tensor, with no communication.
void init_local_shard(const ParamSpec& spec, const TpShard& shard, uint64_t seed, double* out);
// This rank's shard of a full logical tensor (logical numel elements) -> local numel; padding 0.
std::vector<double> extract_shard(const TpShard& shard, const std::vector<double>& full);
// The full logical tensor from every rank's shard (collective over `tp`: one all-gather), on every
// rank. `shard` is this rank's (its size and rank must match the group's).
std::vector<double> assemble_full(Communicator& tp, const TpShard& shard, const std::vector<double>& local);

}  // namespace tripod::tp
