// An exclusive flock(2) on a file, taken without waiting and held until the object goes: what keeps
// two runs from writing one checkpoint root (ckpt/root_lock.h) or one metrics file; or on a folder
// itself (core/folder_writer_lock.h), where every file in it is the product and a lock file would
// be one too (a Hugging Face export, a golden bundle). The kernel
// releases it when the process ends, however it ends, so a crashed run leaves no stale lock; the
// file itself stays (removing it would race with the next run's open).
#pragma once
#include <filesystem>
#include <string>

namespace tripod {

class ExclusiveFileLock {
 public:
  enum class State {
    Held,         // this object holds the lock
    HeldElsewhere,  // another open file (another run) holds it
    Unsupported,  // the file system does not lock (some network file systems): nothing held
  };
  // Opens `file` (created if absent, never truncated) and tries the lock; throws tripod::Error
  // "cannot write <role>: <why>" when it cannot be opened (`role` names the file and what it is).
  ExclusiveFileLock(const std::filesystem::path& file, const std::string& role);
  // Locks the existing folder `folder` through an open descriptor of it: nothing is written into it.
  struct FolderItself {};
  ExclusiveFileLock(const std::filesystem::path& folder, const std::string& role, FolderItself);
  ~ExclusiveFileLock();
  ExclusiveFileLock(const ExclusiveFileLock&) = delete;
  ExclusiveFileLock& operator=(const ExclusiveFileLock&) = delete;

  State state() const { return state_; }
  int error() const { return error_; }  // flock's errno where the state is Unsupported
  // The open file (-1 once closed): where the holder may write who it is, or read another's.
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  State state_ = State::Unsupported;
  int error_ = 0;
};

}  // namespace tripod
