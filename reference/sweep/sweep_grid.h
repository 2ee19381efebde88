// Expanding a sweep spec into its runs: for each budget C, model sizes log-spaced around the
// Chinchilla-optimal N_c = sqrt(C / (6 r)) (r tokens per parameter), each trained for
// D = C / (FLOPs per token) tokens, rounded to whole steps of batch x context tokens; each run's
// LR, warm-up and cosine decay follow the spec's rules and end at the run's own last step.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sweep/model_shapes.h"
#include "sweep/sweep_spec.h"

namespace tripod::sweep {

// What the grid needs to know of the corpus (known before a synthetic corpus is generated).
struct CorpusInfo {
  std::filesystem::path dir;  // absolute
  int64_t vocab = 0;
  int64_t train_tokens = 0;
  double entropy_rate_nats = -1;  // exact for the synthetic corpus; -1: unknown (natural text)
  std::string train_tokens_xxh64;  // data::TokenDataset::tokens_xxh64 of the train split (prepare_corpus)
};

struct PlannedRun {
  std::string name;       // "C1e12-L2-d64" (+ "-s<seed>" when the spec has several seeds)
  double budget = 0;      // the nominal budget C (FLOPs)
  uint64_t seed = 0;
  ModelShape shape;
  double target_n = 0;    // the IsoFLOP design point the shape was chosen for (0: explicit shapes)
  ShapeCost cost;
  int64_t n = 0;          // N under the spec's convention
  double flops_per_token = 0;  // under the spec's convention
  int64_t steps = 0;
  int64_t tokens = 0;     // D = steps x batch x context
  double flops = 0;       // C actually spent = D x flops_per_token (near the budget, not equal)
  double lr = 0, min_lr = 0;
  int64_t warmup_steps = 0;
  nlohmann::json config;  // complete `tripod train` config, paths filled in by the runner
};

// "1e12", "3e12", "2.5e13": budgets in run names and records.
std::string budget_label(double flops);

// The run configuration for `tripod train` (train.metrics and checkpoints are set by the runner).
nlohmann::json run_config(const SweepSpec& spec, const CorpusInfo& corpus, const PlannedRun& run);

// Every run of the sweep, ordered by budget, then N, then seed.
// Throws naming the spec, budget and model when a run gets less than one batch or under min_steps.
std::vector<PlannedRun> expand_grid(const SweepSpec& spec, const CorpusInfo& corpus);

}  // namespace tripod::sweep
