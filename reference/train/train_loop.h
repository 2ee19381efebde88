// The training run: opens the data, builds or resumes the trainer, runs the steps with one
// progress line each, evaluates on held-out data, writes JSONL metrics and checkpoints.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "train/distributed_trainer.h"
#include "train/run_config.h"

namespace tripod {

struct TrainOptions {
  // A checkpoint root (ckpt/checkpoint_root.h): checkpoints at the end, every train.save_every
  // steps, and when SIGTERM/SIGINT/SIGHUP stops the run.
  std::string save_dir;
  // The fast tier (train/run_checkpoints.h): a second checkpoint root, saved to every
  // train.local_save_every steps; resuming takes the newest checkpoint of either root.
  std::string save_local_dir;
  // Continue from this checkpoint (a step directory, or a root's latest); "auto": from the newest
  // of save_dir's and save_local_dir's if there is one, else from step 0 (what a supervised
  // restart runs).
  std::string resume_dir;
  bool allow_resume_changes = false;  // resume even if the data order or schedule changed
  int64_t exit_after = 0;  // stop (and checkpoint) after this many steps of this invocation, as if
                           // interrupted; 0 runs to train.steps
  // Stop (and checkpoint) after the first step that ends this many minutes after start-up, every
  // rank agreeing (Megatron's --exit-duration-in-mins): a batch job ends with its checkpoint before
  // its wall-time limit. 0: no limit.
  double exit_after_minutes = 0;
  // A testing aid (--slow-rank R:MS): world rank R sleeps MS milliseconds in every step, a straggler
  // for the per-rank timing report (train/rank_timing.h) to find. -1: none.
  int slow_rank = -1;
  double slow_rank_ms = 0;
};

struct TrainSummary {
  int64_t steps = 0;        // net: the step reached less the step started from
  int64_t steps_taken = 0;  // every step run, skipped and rolled-back ones included
  int64_t steps_applied = 0;  // the steps whose update was applied (first_loss and final_loss are theirs)
  double first_loss = 0, final_loss = 0, final_val_loss = -1;  // -1: no held-out data
  double tokens_per_second = 0, mfu = 0, seconds = 0;
};

// Resolves model.vocab_size 0 to the data's vocabulary; a model vocabulary smaller than the
// tokenizer's is an error naming both.
void resolve_vocab(RunConfig& config, int64_t data_vocab, const std::string& data_dir);

// A multi-rank run: the world (for reporting), its process grid and the layout.
struct ParallelRun {
  Communicator* world = nullptr;
  const ProcessGrid* grid = nullptr;
  ParallelLayout layout;
  std::string pipeline_trace;  // write the last step's pipeline timeline here (JSON), if set
};

// Single-process when `parallel` is null. Rank 0 prints and writes metrics; every rank's memory is
// printed at start-up. Every tensor lives on `backend` (the communicators of `parallel` must accept
// its tensors: comm/staged_communicator.h's communicator_for).
TrainSummary run_training(RunConfig config, const TrainOptions& options, Backend& backend,
                          const ParallelRun* parallel = nullptr);

}  // namespace tripod
