// Vocabulary-parallel embedding and cross-entropy (Megatron): rank r holds rows [start, start+rows)
// of the token embedding wte (tied: the same shard is the LM head's column-parallel weight), so the
// logits of a token are split across ranks by vocabulary and the full [N, V] logits never exist on
// one rank.
//
// Padding. V rows do not split evenly in general; the table is padded to V_padded = tp * rows rows,
// rows = ceil(V/tp) per rank, rounded up to a multiple of `multiple` when one is asked for
// (Megatron's --make-vocab-size-divisible-by: GEMM widths that are a multiple of 64 or 128 give
// aligned rows and whole tiles on a GPU; V_padded is then divisible by multiple * tp, as
// Megatron's). Rows >= V are padding: no token selects them, their logits are
// excluded from the max and the sum of exponentials (never read), their logit gradients are exactly
// 0 (so the LM head gives them a zero weight gradient) and the embedding backward never touches
// them. With V small and tp large a rank may hold only padding (V=11, tp=8: ranks 6 and 7).
//
// The per-rank arithmetic is the backend's (its vocabulary-window operations, in the unsplit
// kernels' order); the reductions between them are here, so the backend knows nothing of groups.
//
// Token and target ids are checked on every rank before any communication, where the backend can
// check them (the same ids give the same error everywhere); the model checks them on the host.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "parallel/tp_group.h"

namespace tripod::tp {

struct VocabShard {
  int64_t vocab = 0;  // V, the real vocabulary size
  int64_t rows = 0;   // ceil(V/tp), rounded up to `multiple`: table rows (and logit columns) on every rank
  int64_t start = 0;  // first vocabulary id of this rank: rank * rows
  int multiple = 1;   // rows are a multiple of it
  // Rows that are real tokens, [start, start + valid()); the rest of the shard is padding.
  int64_t valid() const;
  VocabWindow window() const;  // what the backend's vocabulary-window operations take
};

int64_t padded_vocab(int64_t vocab, int tp_size, int multiple = 1);  // tp * round_up(ceil(V/tp), multiple)
VocabShard vocab_shard(int64_t vocab, int tp_size, int tp_rank, int multiple = 1);

// out[N,C] (no SP) or [Ns,C] (SP) = wte[tokens] + wpe[n % seq_len]:
//   partial[n] = wte_shard[tokens[n] - start] if this rank holds the token, else 0   [N,C]
//   out = all_reduce(partial) (in out itself) | SP: reduce_scatter(partial in out_partial) [Ns,C]
//   out[i] += wpe[(first token of out + i) % seq_len]         (once, after the reduction)
// The reduction adds one non-zero row and zeros, so it is exact: out equals the unsplit
// embedding bit for bit. tokens: int32 [N]; wte: [rows, C]; wpe: [context, C]; out_partial: SP only.
void vocab_parallel_embedding_forward(Backend& be, const TpGroup& tp, const VocabShard& shard, const Tensor& out,
                                      const Tensor& out_partial, const Tensor& tokens, const Tensor& wte,
                                      const Tensor& wpe, int64_t seq_len);

// Accumulates dwte[rows,C] (rows of this rank's tokens) and dwpe[context,C] from the full output
// gradient g[N,C] = dout (no SP) or all_gather(dout[Ns,C]) into dout_gathered (SP). Both come out
// complete on every rank and in the unsplit kernel's order over tokens, so they equal the unsplit
// gradients bit for bit; in particular wpe needs no TP all-reduce even under SP.
void vocab_parallel_embedding_backward(Backend& be, const TpGroup& tp, const VocabShard& shard, const Tensor& dwte,
                                       const Tensor& dwpe, const Tensor& dout, const Tensor& dout_gathered,
                                       const Tensor& tokens, int64_t seq_len);

// Softmax cross-entropy over vocab-sharded logits[N, rows] (this rank's columns; padding columns
// are ignored whatever they hold). Three reductions over the group, of N values each:
//   m[n] = all_reduce MAX of the row maxima over valid columns (-inf on an all-padding shard)
//   s[n] = all_reduce SUM of sum_j exp(logits[n,j] - m[n])      } one all-reduce of [2, N]
//   z[n] = all_reduce SUM of logits[n, target - start] (held by one rank; 0 elsewhere) }
//   logsumexp[n] = m + log(s);  losses[n] = logsumexp[n] - z[n], 0 where targets[n] < 0.
// losses and logsumexp are [N], replicated on every rank; logsumexp is kept for backward.
// targets: int32 [N], each < V (or < 0: ignored).
// `faults` (conformance self-tests) may plant the padded-softmax or the SUM-shift bug.
void vocab_parallel_cross_entropy_forward(Backend& be, Communicator& tp, const VocabShard& shard, const Tensor& losses,
                                          const Tensor& logsumexp, const Tensor& logits, const Tensor& targets,
                                          const FaultPlan* faults = nullptr);

// In place, no communication: logits[N, rows] become
// grad_scale * (exp(logits - logsumexp) - onehot(target, if this rank holds it)); padding columns
// and ignored rows become 0.
void vocab_parallel_cross_entropy_backward(Backend& be, const VocabShard& shard, const Tensor& logits,
                                           const Tensor& logsumexp, const Tensor& targets, double grad_scale,
                                           const FaultPlan* faults = nullptr);
// The same gradient as the LM head's prepared GEMM operand (Backend::
// cross_entropy_backward_window_operand; the logits are used up): for layers that keep prepared
// inputs, which a vocabulary on one rank does (TensorParallelLayers::keeps_prepared_inputs).
Tensor vocab_parallel_cross_entropy_backward_operand(Backend& be, const VocabShard& shard, const Tensor& logits,
                                                     const Tensor& logsumexp, const Tensor& targets,
                                                     double grad_scale, const FaultPlan* faults = nullptr);

}  // namespace tripod::tp
