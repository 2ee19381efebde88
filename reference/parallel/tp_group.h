// The tensor-parallel group a layer runs in, and the checks that decide whether a model can be
// split over it. Megatron's tensor parallelism (Shoeybi et al. 2019) with its sequence parallelism
// (Korthikanti et al. 2022); the building blocks are in tp_regions.h, tp_linear.h and tp_vocab.h,
// the parameter shard maps in tp_shard.h.
//
// Sequence split. Activations are token-major [N, C] with N = B*T tokens, token n = b*T + t. Under
// sequence parallelism rank r holds the contiguous block of tokens [r*N/tp, (r+1)*N/tp) (a block may
// cross sequence boundaries: the sequence-parallel regions — LayerNorm, residual adds, biases, the
// position embedding — work token by token). Contiguous blocks make every all-gather and
// reduce-scatter a plain block collective in row-major memory, with no reordering. N % tp == 0 is
// required.
//
// One block, as a model calls them ("x" is the residual stream: [N,C] without SP, [Ns,C] = this
// rank's tokens with SP; collectives written "no SP | SP"):
//   forward                                          backward (reverse order, dx = d out)
//   ln = layernorm(x)                   local        dx += layernorm_backward(dln)  (SP: LN grads partial)
//   qkv[N,3C/tp] = column(ln; c_attn)   f | ḡ        dln = column_backward(dqkv)    all-reduce | reduce-scatter
//   atty[N,C/tp] = attention(H/tp heads) local       dqkv = attention_backward(datty)
//   x = x + row(atty; c_proj)           g | ḡ*       datty = row_backward(dx)       identity | all-gather
//   (the MLP half likewise: c_fc column-parallel, gelu local, c_proj row-parallel)
// Around the blocks: vocab_parallel_embedding (all-reduce | reduce-scatter) at the bottom; at the
// top the LM head is a column-parallel linear on the same wte shard (tied) feeding
// vocab_parallel_cross_entropy. Once per step, before the optimizer, the gradients that
// tp_grad_needs_allreduce names are summed over TP (SP only).
//
// Every check here depends only on arguments every rank of the group has, and the messages name no
// rank, so a bad layout throws the same tripod::Error on every rank before any communication and
// nothing hangs.
#pragma once
#include <cstdint>

#include "comm/communicator.h"
#include "model/config.h"
#include "parallel/fault_plan.h"

namespace tripod::tp {

struct TpGroup {
  Communicator& comm;              // the tensor-parallel group (ProcessGrid::tp())
  bool sequence_parallel = false;  // activations outside the parallel regions are split by tokens
  const FaultPlan* faults = nullptr;  // conformance self-tests only (parallel/fault_plan.h)
  int size() const { return comm.size(); }
  int rank() const { return comm.rank(); }
  bool fault(Fault f) const { return faults != nullptr && faults->has(f); }
};

// Throws unless the model splits over `tp_size` ranks: tp >= 1, tp <= n_head (attention is split by
// whole heads), tp divides n_head (hence d_model, a multiple of n_head) and d_ff.
void validate_tensor_parallel(const ModelConfig& config, int tp_size);

// N / tp: the tokens each rank holds under sequence parallelism; throws unless tp divides N.
int64_t sequence_shard_rows(int64_t n_tokens, int tp_size);

}  // namespace tripod::tp
