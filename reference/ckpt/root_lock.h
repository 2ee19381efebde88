// One run at a time in a checkpoint root. Two runs saving into one root (a job submitted again
// while the first still runs, `--resume auto` in both) deleted each other's staged saves at
// start-up, replaced each other's step directories, pruned each other's checkpoints and moved one
// `latest` between them, each exiting 0. The run's root rank holds an exclusive flock(2) on
// ROOT/.lock for the run's life; the kernel releases it when the process ends, however it ends, so
// a crashed run leaves no stale lock. The file (kept: removing it would race with the next run's
// open) says who holds it, for the next one's error.
#pragma once
#include <filesystem>
#include <string>

namespace tripod::ckpt {

inline constexpr const char* kLockFile = ".lock";

class RootLock {
 public:
  // Takes the lock of `root` (an existing folder), or throws naming the run that holds it
  // (`option`: "--save" or "--save-local"). Where the file system does not lock (some network
  // file systems without their lock service), prints a warning and holds nothing.
  RootLock(const std::filesystem::path& root, const std::string& option);
  ~RootLock();
  RootLock(const RootLock&) = delete;
  RootLock& operator=(const RootLock&) = delete;

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace tripod::ckpt
