// A checkpoint save that overlaps training (train.async_save). Between two steps the state is
// copied to host memory - with the ranks' agreement on the staging directory, the only stall -;
// a background thread writes this rank's shard file while the next steps run; once every rank's
// file is written (poll(), at a step boundary), the ranks exchange their file entries and rank 0's
// background thread writes the manifest and publishes the step directory and `latest`; a later
// poll() hears the outcome. Until then the previous checkpoint stays the latest, so a crash during
// the save loses only this save. Collectives stay on the training thread: the background threads
// touch files and the snapshot, never the communicator.
// Cost: one host copy of the rank's saved state, kept between saves (release_buffers) so that a
// snapshot is a copy into memory already mapped.
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
  // Collective: stages the step directory, snapshots `regions` (into `buffers`, the buffers of an
  // earlier save, where they fit) and starts the writer.
  AsyncSave(Communicator* world, std::filesystem::path root, const std::vector<StateRegion>& regions,
            Backend& backend, const CheckpointMeta& meta, StateSnapshot buffers = {});
  // Joins the background threads; a save abandoned by an error is removed by the next run's
  // start-up clean-up.
  ~AsyncSave();
  AsyncSave(const AsyncSave&) = delete;
  AsyncSave& operator=(const AsyncSave&) = delete;

  // Collective, between steps: moves the save on as far as it can go without waiting. Returns
  // true once the checkpoint is published; throws on every rank, naming what failed.
  bool poll();
  // Collective: waits for the rest of the save; returns the published directory.
  std::filesystem::path finish();
  // The snapshot's host buffers, for the next save (after finish()).
  StateSnapshot release_buffers() { return std::move(snapshot_); }

  int64_t step() const { return meta_.step; }
  std::filesystem::path directory() const;
  double snapshot_seconds() const { return snapshot_seconds_; }  // the training thread's stall
  double write_seconds() const { return write_seconds_; }        // the shard writer's own time
  double exchange_seconds() const { return exchange_seconds_; }  // the entry exchange (a stall)
  double publish_seconds() const { return publish_seconds_; }    // rank 0's publisher (background)

 private:
  enum class Phase { Writing, Publishing, Published };
  bool all_ranks(bool mine) const;
  void start_publishing();  // collective: the entry exchange, then rank 0's publisher thread

  Communicator* world_;
  std::filesystem::path root_, staged_;
  CheckpointMeta meta_;
  Phase phase_ = Phase::Writing;
  StateSnapshot snapshot_;
  ckpt::ShardFile shard_;
  std::string write_error_, publish_error_;
  double snapshot_seconds_ = 0, write_seconds_ = 0, exchange_seconds_ = 0, publish_seconds_ = 0;
  std::atomic<bool> written_{false}, published_{false};
  std::thread writer_, publisher_;
};

}  // namespace tripod
