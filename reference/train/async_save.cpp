#include "train/async_save.h"

#include <chrono>

namespace tripod {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

AsyncSave::AsyncSave(Communicator* world, std::filesystem::path root, const std::vector<StateRegion>& regions,
                     Backend& backend, const CheckpointMeta& meta)
    : world_(world), root_(std::move(root)), meta_(meta) {
  const auto start = std::chrono::steady_clock::now();
  staged_ = stage_checkpoint(world_, root_, meta_.step);
  snapshot_ = snapshot_state(regions, backend);
  snapshot_seconds_ = seconds_since(start);
  // The writer touches only the snapshot, the staging directory and its own outcome; the training
  // thread reads those only after joining it.
  writer_ = std::thread([this] {
    const auto begin = std::chrono::steady_clock::now();
    try {
      shard_ = write_shard(staged_, world_ ? world_->rank() : 0, meta_.step, snapshot_);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    write_seconds_ = seconds_since(begin);
    written_.store(true, std::memory_order_release);
  });
}

AsyncSave::~AsyncSave() {
  if (writer_.joinable()) writer_.join();
}

std::filesystem::path AsyncSave::finish() {
  if (writer_.joinable()) writer_.join();
  const std::filesystem::path dir =
      finish_checkpoint_save(world_, root_, staged_, shard_, error_, snapshot_.regions, meta_);
  snapshot_ = {};  // the host copy is no longer needed
  return dir;
}

}  // namespace tripod
