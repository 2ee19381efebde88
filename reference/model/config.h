// GPT model shape (read from a run config's "model" section by train/run_config.h). Validated
// there, so that a contradictory config fails with a message naming the offending key before
// anything is allocated.
#pragma once
#include <cstdint>
#include <string>

namespace tripod {

struct ModelConfig {
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t d_model = 64;
  int64_t d_ff = 256;        // MLP hidden width (GPT-2: 4 * d_model)
  int64_t vocab_size = 512;  // rows of the embedding / LM head
  int64_t context = 64;      // rows of the learned position table (max sequence length)
  bool tie_embeddings = true;
  double layernorm_eps = 1e-5;

  int64_t head_dim() const { return d_model / n_head; }
  void validate() const;  // throws tripod::Error naming the bad key
};

}  // namespace tripod
