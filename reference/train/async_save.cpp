#include "train/async_save.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "ckpt/checkpoint_root.h"
#include "comm/host_collectives.h"
#include "core/wall_clock.h"
#include "train/fault_injection.h"

namespace tripod {
namespace {

// The background threads yield the CPU to training: on a host whose cores all run the step (the
// CPU backend), a writer at normal priority would slow the steps it overlaps by its whole copy
// into the page cache. Lowering its own priority needs no privilege; failure changes nothing.
void lower_this_threads_priority() {
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, tid, 19);
}

}  // namespace

AsyncSave::AsyncSave(Communicator* world, std::filesystem::path root, const std::vector<StateRegion>& regions,
                     Backend& backend, const CheckpointMeta& meta, StateSnapshot buffers)
    : world_(world), root_(std::move(root)), meta_(meta) {
  const auto start = std::chrono::steady_clock::now();
  staged_ = stage_checkpoint(world_, root_, meta_.step);
  // Host memory may be read by another thread while this one computes the next step's gradients
  // (CpuBackend::download is a memcpy); a device's stream belongs to the training thread.
  const bool copy_in_background = backend.device() == Device::Host;
  if (!copy_in_background) {
    snapshot_ = snapshot_state(regions, backend, std::move(buffers));
    snapshotted_ = true;
  }
  staging_seconds_ = seconds_since(start);
  // The writer touches only the snapshot, the staging directory and its own outcome; the training
  // thread reads those only after the flags (or the join) say it is done.
  writer_ = std::thread([this, copy_in_background, regions, &backend, buffers = std::move(buffers)]() mutable {
    lower_this_threads_priority();
    const auto begin = std::chrono::steady_clock::now();
    try {
      if (copy_in_background) {
        maybe_delay_snapshot();
        try {
          snapshot_ = snapshot_state(regions, backend, std::move(buffers));
        } catch (...) {
          mark_snapshotted();
          throw;
        }
        mark_snapshotted();
      }
      shard_ = write_shard(staged_, world_ ? world_->rank() : 0, meta_.step, snapshot_);
    } catch (const std::exception& e) {
      write_error_ = e.what();
    }
    write_seconds_ = seconds_since(begin);
    written_.store(true, std::memory_order_release);
  });
}

void AsyncSave::mark_snapshotted() {
  {
    const std::lock_guard<std::mutex> lock(snapshot_mutex_);
    snapshotted_ = true;
  }
  snapshot_done_.notify_all();
}

void AsyncSave::wait_for_snapshot() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(snapshot_mutex_);
  if (snapshotted_) return;
  snapshot_done_.wait(lock, [this] { return snapshotted_; });
  copy_wait_seconds_ += seconds_since(start);
}

AsyncSave::~AsyncSave() {
  if (writer_.joinable()) writer_.join();
  if (publisher_.joinable()) publisher_.join();
}

std::filesystem::path AsyncSave::directory() const { return root_ / ckpt::step_dir_name(meta_.step); }

bool AsyncSave::all_ranks(bool mine) const {
  return world_ ? all_reduce_value(*world_, mine ? 1.0 : 0.0, ReduceOp::Min) == 1.0 : mine;
}

void AsyncSave::start_publishing() {
  writer_.join();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> entries =
      gather_shard_entries(world_, staged_, shard_, write_error_, snapshot_.regions, meta_.step);
  exchange_seconds_ = seconds_since(start);
  phase_ = Phase::Publishing;
  if (world_ && world_->rank() != 0) {
    published_.store(true, std::memory_order_release);  // only rank 0 publishes
    return;
  }
  const int world_size = world_ ? world_->size() : 1;
  publisher_ = std::thread([this, entries = std::move(entries), world_size] {
    lower_this_threads_priority();
    const auto begin = std::chrono::steady_clock::now();
    try {
      publish_manifest(root_, staged_, entries, meta_, world_size);
    } catch (const std::exception& e) {
      publish_error_ = e.what();
    }
    publish_seconds_ = seconds_since(begin);
    published_.store(true, std::memory_order_release);
  });
}

void AsyncSave::complete_publication() {
  if (publisher_.joinable()) publisher_.join();
  phase_ = Phase::Published;
  agree_publication(world_, publish_error_);
}

bool AsyncSave::poll() {
  if (phase_ == Phase::Writing && all_ranks(written_.load(std::memory_order_acquire))) start_publishing();
  if (phase_ == Phase::Publishing && all_ranks(published_.load(std::memory_order_acquire))) complete_publication();
  return phase_ == Phase::Published;
}

std::filesystem::path AsyncSave::finish() {
  if (phase_ == Phase::Writing) start_publishing();
  if (phase_ == Phase::Publishing) complete_publication();
  return directory();
}

}  // namespace tripod
