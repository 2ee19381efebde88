// The configuration of a training run: a JSON file (a named preset in reference/configs/ or a
// path), then `--set section.key=value` overrides. Every key must exist in the defaults below:
// an unknown key or a value of the wrong type is an error naming the key, never ignored.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "perf/device_peak.h"
#include "train/step_guard.h"

namespace tripod {

struct TrainSettings {
  // train.dtype is the precision policy: fp64, fp32, or bf16-mixed (fp32 master weights, Adam
  // state, gradients, reductions, LayerNorm statistics and loss; every GEMM's operands rounded to
  // bf16 with fp32 accumulation, as PyTorch's bf16 autocast runs a GPT's matmuls). `dtype` is the
  // dtype of the tensors: fp32 for bf16-mixed.
  // tf32: fp32 tensors, every GEMM's operands rounded to TF32 (PyTorch's allow_tf32 matmuls).
  DType dtype = DType::F32;
  bool bf16_mixed = false;
  bool tf32 = false;
  int64_t batch_size = 8;    // global batch, in sequences
  int64_t seq_len = 64;
  int64_t micro_batches = 1;  // gradient accumulation steps per optimizer step
  Recompute recompute = Recompute::None;  // activation recomputation (model/recompute.h)
  int64_t steps = 100;
  uint64_t seed = 1234;       // initialisation and data order
  int64_t log_every = 1;
  int64_t eval_every = 0;     // 0: evaluate only at the end
  int64_t eval_batches = 4;
  double peak_tflops = 0;     // 0: nominal peak of this CPU, estimated
  std::string metrics;        // JSONL metrics path ("" = none)
  int64_t save_every = 0;     // checkpoint every N steps to --save ROOT (0: only at the end)
  int64_t keep_checkpoints = 2;  // the newest N checkpoints under --save ROOT are kept
  int64_t local_save_every = 0;  // checkpoint every N steps to --save-local ROOT (train/run_checkpoints.h)
  bool async_save = false;    // write the scheduled saves in the background (train/async_save.h)
  std::vector<int64_t> pipeline_split;  // layers per pipeline chunk (empty: even split)
  // Data parallelism, tied head and embedding in one stage: wte's gradient reduced in two parts, the
  // head's during backward and the lookup's token rows after it (parallel/gradient_buckets.h). An
  // untied wte: only its token rows (and wpe) are reduced, where nothing accumulated in the table.
  bool split_tied_grad = true;
  int64_t rank_stats_every = 10;        // multi-rank runs: gather per-rank step times (train/rank_timing.h)
};

struct DataSettings {
  std::string dir;  // a prepared token directory (tripod data prepare / synthetic)
};

struct RunConfig {
  ModelConfig model;
  TrainSettings train;
  AdamWConfig adamw;
  LrSchedule schedule;  // total_steps = train.steps
  double grad_clip = 1.0;
  DataSettings data;
  AnomalySettings anomaly;  // what a step with a non-finite or spiking loss does
  nlohmann::json json;  // the fully resolved configuration, as written to metrics and checkpoints
};

// Default configuration (every key that may appear in a config file).
nlohmann::json default_config_json();
// Resolves a preset name ("tiny") to reference/configs/tiny.json, or returns a path as given.
std::string resolve_config_path(const std::string& name_or_path);
// Loads a config file, applies overrides ("train.steps=10"), checks keys and types.
nlohmann::json load_config_json(const std::string& name_or_path, const std::vector<std::string>& overrides);
// The same on top of `base` instead of the defaults (conform starts from its own model).
nlohmann::json load_config_json(nlohmann::json base, const std::string& name_or_path,
                                const std::vector<std::string>& overrides);
// Typed view; validates values (throws naming the key). model.vocab_size 0 means "from the data".
// Sets the backend's GEMM policy for the run's precision (backend.h's Fp32Matmul): bf16 operands
// under bf16-mixed, exact otherwise. Both trainers call it, so every run on a backend uses its
// config's policy whatever ran on that backend before.
void apply_precision_policy(const TrainSettings& train, Backend& backend);
// bf16-mixed and tf32: the GEMMs' operands are rounded below fp32.
inline bool rounds_gemm_operands(const TrainSettings& train) { return train.bf16_mixed || train.tf32; }
// "fp64", "fp32", "tf32" or "bf16-mixed".
std::string precision_name(const TrainSettings& train);
// The arithmetic the run's GEMMs are in (bf16 under bf16-mixed, TF32 under tf32): the peak its
// MFU is held against.
PeakPrecision gemm_peak_precision(const TrainSettings& train);

RunConfig parse_run_config(const nlohmann::json& resolved);

}  // namespace tripod
