// FLOP accounting for MFU (PaLM appendix B / llm.c convention).
//
// Model FLOPs per token = 6 * N_matmul + 12 * L * d_model * T, where
//   N_matmul = the weights that take part in matrix multiplies: every block's c_attn, attn.c_proj,
//              mlp.c_fc and mlp.c_proj weights, plus the LM head (V x d_model; with tied embeddings
//              that is wte, counted once). The position table (a lookup), biases and LayerNorm gains
//              are excluded: they do no matmul work.
//   6 = 2 (multiply-add) x 3 (forward, backward w.r.t. inputs, backward w.r.t. weights);
//   12 * L * d_model * T = attention scores (QK^T) and the weighted sum (PV), forward and backward,
//              counted for full T x T attention as the convention does (causal masking does not halve it).
// Hardware FLOPs would also count the forward recomputed under train.recompute (selective: the
// attention probabilities and GELU; full: the whole forward, 2 N_matmul + 4 L d_model T more per
// token); MFU counts model FLOPs only, and no HFU is reported.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace tripod {

struct FlopCount {
  int64_t n_params_total = 0;    // every parameter, embeddings included (scaling-law N)
  int64_t n_params_matmul = 0;   // N_matmul above
  double model_flops_per_token = 0;
  double attention_flops_per_token = 0;  // the 12 L d T term
};

FlopCount count_flops(const ModelConfig& config, int64_t seq_len);

// Model FLOP utilisation: achieved model FLOP/s divided by the peak.
inline double mfu(double flops_per_step, double step_seconds, double peak_flops) {
  return step_seconds > 0 && peak_flops > 0 ? flops_per_step / step_seconds / peak_flops : 0.0;
}

}  // namespace tripod
