// Shared helpers for the model and trainer tests: tiny configurations, random batches, one step.
#pragma once
#include <cstdint>

#include "data/random_batch.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace tripod::testing {

// A tiny GPT (2 layers, 2 heads, d_model 8) in the given dtype.
inline RunConfig tiny_run_config(const std::string& dtype, bool tied, int64_t micro_batches = 1) {
  nlohmann::json cfg = default_config_json();
  cfg["model"] = {{"n_layer", 2}, {"n_head", 2}, {"d_model", 8}, {"d_ff", 16}, {"vocab_size", 11},
                  {"context", 6}, {"tie_embeddings", tied}, {"layernorm_eps", 1e-5}};
  cfg["train"]["dtype"] = dtype;
  cfg["train"]["batch_size"] = 4;
  cfg["train"]["seq_len"] = 5;
  cfg["train"]["micro_batches"] = micro_batches;
  cfg["train"]["steps"] = 6;
  cfg["optim"]["warmup_steps"] = 2;
  cfg["optim"]["lr"] = 1e-2;
  return parse_run_config(cfg);
}

// Random tokens; roughly one target in six ignored (-1).
inline data::Batch random_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  return data::random_token_batch(B, T, vocab, seed, "test.batch", 1.0 / 6);
}

// One training step of `config` from a fresh initialisation on a random batch: the run of the tests
// that count what a step calls on a backend.
inline void train_one_step(Backend& be, const RunConfig& config, uint64_t seed = 7) {
  Trainer trainer(config, be);
  trainer.initialise();
  trainer.train_step(random_batch(config.train.batch_size, config.train.seq_len, config.model.vocab_size, seed));
}

}  // namespace tripod::testing
