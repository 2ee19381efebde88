// The GEMMs of one transformer layer (and the LM head) on one tensor-parallel rank, exactly as
// model/linear.cpp issues them. A linear layer y[N,O] = x[N,I] W[O,I]^T runs three GEMMs:
//   forward       y[N,O]  = x[N,I]   @ W[O,I]^T    (M=N, N=O, K=I)
//   input grad    dx[N,I] = dy[N,O]  @ W[O,I]      (M=N, N=I, K=O)
//   weight grad   dW[O,I] += dy^T[O,N] @ x[N,I]    (M=O, N=I, K=N)
// each 2*N*O*I FLOPs. With tensor parallelism (Megatron) the column-parallel layers (QKV, MLP up,
// vocab-parallel LM head) split O, the row-parallel ones (attention and MLP projections) split I.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace tripod::microbench {

struct GemmShape {
  std::string name;  // "qkv.fwd", "fc_proj.bwd_weight", ...
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double beta = 0;  // 1 for the weight gradient (it accumulates over micro-batches)
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
  std::string dims() const;  // "1024x2304x768" (M x N x K)
};

// QKV [N, 3C/tp, C], attention projection [N, C, C/tp], MLP up [N, F/tp, C], MLP down [N, C, F/tp],
// LM head [N, ceil(V/tp), C] (forward shapes as [M, N, K]), each followed by its two backward GEMMs.
std::vector<GemmShape> transformer_layer_gemms(const ModelConfig& model, int64_t tp, int64_t tokens);

}  // namespace tripod::microbench
