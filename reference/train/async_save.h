// A checkpoint save that overlaps training (train.async_save). The state is copied to host
// memory: between two steps on a device backend, or - when the state already lives in host memory
// (the CPU backend) - by the background thread while the next step computes its gradients, the
// step's update waiting for the copy (wait_for_snapshot, from the step's gate: nothing changes the
// parameters or AdamW moments before the update). That copy, and the ranks' agreement on the
// staging directory, are the stall. The background thread then writes this rank's shard file
// while the next steps run; once every rank's
// file is written (poll(), at a step boundary), the ranks exchange their file entries and rank 0's
// background thread writes the manifest and publishes the step directory and `latest`; a later
// poll() hears the outcome. Until then the previous checkpoint stays the latest, so a crash during
// the save loses only this save. Collectives stay on the training thread: the background threads
// touch files and the snapshot, never the communicator.
// Cost: one host copy of the rank's saved state, kept between saves (release_buffers) so that a
// snapshot is a copy into memory already mapped.
#pragma once
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
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

  // Blocks until the state is copied (at once where the constructor copied it); call before the
  // next update of the saved state. Its wait counts into snapshot_seconds().
  void wait_for_snapshot();
  // Collective, between steps: moves the save on as far as it can go without waiting. Returns
  // true once the checkpoint is published; throws on every rank, naming what failed.
  bool poll();
  // Collective: waits for the rest of the save; returns the published directory.
  std::filesystem::path finish();
  // The snapshot's host buffers, for the next save (after finish()).
  StateSnapshot release_buffers() { return std::move(snapshot_); }

  int64_t step() const { return meta_.step; }
  std::filesystem::path directory() const;
  // The training thread's stall for the copy: staging (and the copy itself on a device), plus
  // any wait in wait_for_snapshot (copy_wait_seconds).
  double snapshot_seconds() const { return staging_seconds_ + copy_wait_seconds_; }
  double copy_wait_seconds() const { return copy_wait_seconds_; }
  double write_seconds() const { return write_seconds_; }        // the shard writer's own time
  double exchange_seconds() const { return exchange_seconds_; }  // the entry exchange (a stall)
  double publish_seconds() const { return publish_seconds_; }    // rank 0's publisher (background)

 private:
  enum class Phase { Writing, Publishing, Published };
  bool all_ranks(bool mine) const;
  void start_publishing();  // collective: the entry exchange, then rank 0's publisher thread
  void mark_snapshotted();  // the writer's: the copy is done (or failed), the update may go on
  void complete_publication();  // collective: joins rank 0's publisher, every rank hears its outcome

  Communicator* world_;
  std::filesystem::path root_, staged_;
  CheckpointMeta meta_;
  Phase phase_ = Phase::Writing;
  StateSnapshot snapshot_;
  ckpt::ShardFile shard_;
  std::string write_error_, publish_error_;
  double staging_seconds_ = 0, copy_wait_seconds_ = 0, write_seconds_ = 0, exchange_seconds_ = 0, publish_seconds_ = 0;
  std::atomic<bool> written_{false}, published_{false};
  std::mutex snapshot_mutex_;
  std::condition_variable snapshot_done_;
  bool snapshotted_ = false;  // under snapshot_mutex_
  std::thread writer_, publisher_;
};

}  // namespace tripod
