// A scaling-law sweep specification (scaling/specs/*.json; the schema is in scaling/README.md):
// the corpus, the compute budgets, how model shapes are chosen per budget, the batch/LR/warm-up
// rules and the N and C conventions. Loading checks every key: an unknown key or a bad value is an
// error naming the spec file and the key, because a silently ignored typo changes a whole sweep.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tripod::sweep {

// What N means in the fit: every parameter (Chinchilla; right at small scale, Porian et al. 2024)
// or everything but the token and position embeddings (Kaplan 2020).
enum class ParamCount { Total, NonEmbedding };
// How a run's compute is counted: 6 x N (N by the convention above) FLOPs per token, or the model
// FLOPs per token of perf/flops.h (6 x matmul weights incl. the LM head + 12 L d T attention).
enum class FlopConvention { SixN, SixNPlusAttention };

std::string param_count_name(ParamCount c);      // "total" | "non_embedding"
std::string flop_convention_name(FlopConvention c);  // "6N" | "6N+attention"

struct SyntheticCorpusSpec {
  int vocab = 64;
  int order = 1;
  double sharpness = 2.0;
  int64_t tokens = 0;
  uint64_t seed = 1;
};

struct CorpusSpec {
  std::filesystem::path dir;                    // a prepared directory (empty when synthetic)
  std::optional<SyntheticCorpusSpec> synthetic;  // generated into OUT/corpus when absent
};

// Shapes derived from a target parameter count: d_model a multiple of head_dim, n_layer such that
// d_model / n_layer stays within a factor aspect_tolerance of aspect_ratio, the (n_layer, d_model)
// pair whose N is nearest the target (in log) wins; n_head = d_model / head_dim, d_ff = d_ff_ratio x d_model.
struct ShapeRule {
  double aspect_ratio = 32;
  double aspect_tolerance = 2;
  int64_t head_dim = 16;
  int64_t d_ff_ratio = 4;
  int64_t max_layers = 24;
  int64_t max_d_model = 2048;
};

struct ExplicitShape {
  int64_t n_layer = 0, d_model = 0, n_head = 0, d_ff = 0;
};

struct ModelsSpec {
  std::optional<ShapeRule> rule;       // exactly one of rule and shapes
  std::vector<ExplicitShape> shapes;
  int64_t sizes_per_budget = 0;        // rule: required; shapes: 0 = every shape at every budget
  double span = 8;                     // largest / smallest target N within a budget
  double tokens_per_param = 20;        // centre of the IsoFLOP sizes: N_c = sqrt(C / (6 r))
};

// lr = base * (reference_d_model / d_model)^width_exponent; min_lr = min_lr_ratio * lr.
struct LrRule {
  double base = 3e-3;
  double reference_d_model = 128;
  double width_exponent = 0;
  double min_lr_ratio = 0.1;
};

// warmup_steps = min(max_steps, round(fraction * steps)); the cosine then decays to min_lr at the
// run's own last step (each run's schedule is fitted to its own token budget).
struct WarmupRule {
  double fraction = 0.05;
  int64_t max_steps = 100;
};

// Per-run settings for the runs whose names match a glob pattern (fnmatch), applied last.
struct RunOverride {
  std::string runs;
  nlohmann::json set;  // {"optim.lr": 1000.0, ...}
};

struct SweepSpec {
  std::filesystem::path file;  // where it was loaded from (named in every error)
  std::string name;
  CorpusSpec corpus;
  ParamCount param_count = ParamCount::Total;
  FlopConvention flops = FlopConvention::SixNPlusAttention;
  std::vector<double> budgets;  // FLOPs, ascending
  ModelsSpec models;
  int64_t context = 64;         // model.context = train.seq_len
  int64_t batch_size = 16;      // sequences per step
  LrRule lr;
  WarmupRule warmup;
  std::vector<uint64_t> seeds = {1};
  int64_t min_steps = 10;        // a run with fewer steps is an error (its LR schedule is meaningless)
  int64_t eval_batches = 8;      // held-out batches for the final eval loss
  double max_epochs = 0;         // > 0: a run reading more than this many epochs of the corpus is an error
  int64_t checkpoint_every = 200;  // steps between checkpoints (what an interrupted run resumes from)
  nlohmann::json settings = nlohmann::json::object();  // extra "section.key": value for every run
  std::vector<RunOverride> overrides;
  nlohmann::json json;          // the spec as read
};

// Resolves "quick" to scaling/specs/quick.json (here or under the source tree), or a path as given.
std::filesystem::path resolve_spec_path(const std::string& name_or_path);
SweepSpec load_sweep_spec(const std::string& name_or_path);
SweepSpec parse_sweep_spec(const nlohmann::json& j, const std::filesystem::path& file);

// Resolves a data directory given relative to the working directory or to the source tree.
std::filesystem::path resolve_data_dir(const std::filesystem::path& dir);

}  // namespace tripod::sweep
