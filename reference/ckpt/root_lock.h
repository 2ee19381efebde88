// One run at a time in a checkpoint root. Two runs saving into one root (a job submitted again
// while the first still runs, `--resume auto` in both) deleted each other's staged saves at
// start-up, replaced each other's step directories, pruned each other's checkpoints and moved one
// `latest` between them, each exiting 0. The run's root rank holds an exclusive lock on ROOT/.lock
// (core/file_lock.h) for the run's life; the file says who holds it, for the next one's error.
#pragma once
#include <filesystem>
#include <string>

#include "core/file_lock.h"

namespace tripod::ckpt {

inline constexpr const char* kLockFile = ".lock";

class RootLock {
 public:
  // Takes the lock of `root` (an existing folder), or throws naming the run that holds it
  // (`option`: "--save" or "--save-local"). Where the file system does not lock (some network
  // file systems without their lock service), prints a warning and holds nothing.
  RootLock(const std::filesystem::path& root, const std::string& option);

  bool held() const { return lock_.state() == ExclusiveFileLock::State::Held; }

 private:
  ExclusiveFileLock lock_;
};

}  // namespace tripod::ckpt
