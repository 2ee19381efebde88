// Shared helpers for the model and trainer tests: tiny configurations and random batches.
#pragma once
#include <cstdint>

#include "core/counter_rng.h"
#include "data/batch_loader.h"
#include "train/run_config.h"

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
  const CounterRng rng(seed, "test.batch");
  data::Batch b;
  b.batch = B;
  b.seq_len = T;
  for (int64_t i = 0; i < B * T; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng.uniform(2 * i) * vocab));
    const double u = rng.uniform(2 * i + 1);
    b.targets.push_back(u < 1.0 / 6 ? -1 : static_cast<int32_t>(u * vocab * 7) % static_cast<int32_t>(vocab));
  }
  return b;
}

}  // namespace tripod::testing
