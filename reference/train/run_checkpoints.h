// The checkpoints of one training run, in up to two tiers:
//
//   --save ROOT          the durable tier: every train.save_every steps, at the end, and when
//                        SIGTERM/SIGINT/SIGHUP stops the run
//   --save-local ROOT    an optional fast tier (a node-local disk, a burst buffer): every
//                        train.local_save_every steps that are not durable saves
//
// Each tier is a checkpoint root of its own (ckpt/checkpoint_root.h), keeping its newest
// train.keep_checkpoints. Scheduled saves run in the background under train.async_save (one save
// in flight at a time, so saves publish in step order); the final one and the one on a signal are
// synchronous and durable. Resuming (`--resume auto`) takes the newest complete checkpoint of
// either tier; rolling back, the one this run saved last (or resumed from). Every rank must see both roots: a node-local disk serves a one-node
// job; across nodes the fast tier must be shared too.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/root_lock.h"
#include "comm/communicator.h"
#include "train/async_save.h"
#include "train/checkpointing.h"
#include "train/train_loop.h"
#include "train/training_engine.h"

namespace tripod {

class RunCheckpoints {
 public:
  // `meta` describes the state about to be saved (step, configuration, layout, data position).
  // `root_rank`: this rank checks the roots at start-up and prints.
  RunCheckpoints(const RunConfig& config, const TrainOptions& options, Backend& backend, Communicator* world,
                 bool root_rank, TrainingEngine& engine, std::function<CheckpointMeta()> meta);

  bool enabled() const { return !durable_.root.empty(); }  // --save given

  // Collective, at start-up: checks each root (absent, empty or a checkpoint root; writable; room
  // for a checkpoint) before any training it could lose, and removes dead saves' leftovers.
  void prepare();

  struct Loaded {
    std::filesystem::path dir;
    ckpt::Manifest manifest;
  };
  // Collective: --resume (a checkpoint, a root, or "auto": the newest of either tier, if any) loaded
  // into the engine, its step set. Nothing when there is nothing to resume.
  std::optional<Loaded> resume();
  // Collective: the checkpoint this run saved last, or resumed from before its first save, loaded
  // into the engine (a rollback). Not the newest of the roots: a run resumed from an older
  // checkpoint of its root goes back on its own timeline, never forward to another's.
  Loaded load_last_checkpoint();
  // After a rollback to `dir`: it records where the data continues (train/checkpointing.h), when it
  // is one of this run's checkpoints (one of another root, that this run resumed from, is left alone).
  void record_rollback_position(const std::filesystem::path& dir, int64_t next_sample);

  // Collective, after each step: moves a background save on, then saves if a tier is due.
  void after_step(bool last_step);
  // Collective: a synchronous durable save now, unless this step is saved there already; returns
  // its directory.
  std::filesystem::path save_now();
  // Collective: waits for a background save.
  void finish_pending();
  // The schedule, as after_step and the final save follow it: whether a checkpoint is written
  // after step `step` (counted from 1), and whether any save runs in the background.
  bool saves_after(int64_t step) const;
  bool saves_in_background() const;
  // Before each update of the state: a background save's copy of it must be complete.
  void before_update() {
    if (pending_) pending_->wait_for_snapshot();
  }

 private:
  struct Tier {
    std::filesystem::path root;
    const char* option;         // "--save" or "--save-local"
    int64_t every = 0;          // its schedule (0: no scheduled saves)
    int64_t last_saved = -1;    // the step its newest checkpoint holds
  };
  std::filesystem::path save(Tier& tier, bool in_background);
  std::optional<std::filesystem::path> newest() const;
  Tier* tier_holding(const std::filesystem::path& checkpoint);  // the tier whose root holds it, or null
  void take_up_the_timeline_of(Tier& own, int64_t step);
  void warn_if_latest_is_unusable(const std::filesystem::path& root) const;
  void report_pending(AsyncSave& done, double waited) const;

  const RunConfig& config_;
  const TrainOptions& options_;
  Backend& backend_;
  Communicator* world_;
  bool root_rank_;
  TrainingEngine& engine_;
  std::function<CheckpointMeta()> meta_;
  Tier durable_, local_;
  // The root rank's locks of the roots (ckpt/root_lock.h), held for the run's life; declared
  // before pending_, so that a background save still in flight is finished before they go.
  std::vector<std::unique_ptr<ckpt::RootLock>> locks_;
  std::unique_ptr<AsyncSave> pending_;  // a background save not yet published
  std::optional<std::filesystem::path> last_checkpoint_;  // saved last or resumed from: a rollback's target
  StateSnapshot buffers_;               // host memory of the previous background save, for the next
};

}  // namespace tripod
