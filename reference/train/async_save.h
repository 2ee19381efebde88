// A checkpoint save that overlaps training (train.async_save): the state is copied to host memory
// between two steps - the only stall -, a background thread writes this rank's shard file while
// the next steps run, and the collective end of the save (every rank's outcome, the manifest,
// `latest`) happens on the training thread, at a step boundary the ranks agree on. Until then the
// previous checkpoint stays the latest, so a crash during the write loses only this save.
// Cost: one host copy of the rank's saved state while a save is in flight.
#pragma once
#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "train/checkpointing.h"

namespace tripod {

class AsyncSave {
 public:
  // Collective: stages the step directory, snapshots `regions` and starts the writer.
  AsyncSave(Communicator* world, std::filesystem::path root, const std::vector<StateRegion>& regions,
            Backend& backend, const CheckpointMeta& meta);
  // Joins the writer; a save abandoned by an error is removed by the next run's start-up clean-up.
  ~AsyncSave();
  AsyncSave(const AsyncSave&) = delete;
  AsyncSave& operator=(const AsyncSave&) = delete;

  // Whether this rank's writer has finished, well or not (not collective).
  bool written() const { return written_.load(std::memory_order_acquire); }
  // Collective: waits for this rank's writer, then publishes the checkpoint (or throws on every
  // rank, naming what failed). Returns its directory.
  std::filesystem::path finish();

  int64_t step() const { return meta_.step; }
  double snapshot_seconds() const { return snapshot_seconds_; }  // the stall of the training thread
  double write_seconds() const { return write_seconds_; }        // the writer's own time

 private:
  Communicator* world_;
  std::filesystem::path root_, staged_;
  CheckpointMeta meta_;
  StateSnapshot snapshot_;
  ckpt::ShardFile shard_;
  std::string error_;
  double snapshot_seconds_ = 0, write_seconds_ = 0;
  std::atomic<bool> written_{false};
  std::thread writer_;
};

}  // namespace tripod
