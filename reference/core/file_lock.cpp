#include "core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tripod {

namespace {

// flock without waiting: Held, HeldElsewhere, or Unsupported with flock's errno.
ExclusiveFileLock::State try_lock(int fd, int& error) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return ExclusiveFileLock::State::Held;
  error = errno;
  return error == EWOULDBLOCK ? ExclusiveFileLock::State::HeldElsewhere : ExclusiveFileLock::State::Unsupported;
}

}  // namespace

ExclusiveFileLock::ExclusiveFileLock(const std::filesystem::path& file, const std::string& role) {
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd_ >= 0, "cannot write ", role, ": ", std::strerror(errno));
  state_ = try_lock(fd_, error_);
}

// A directory opens read-only; Linux's flock locks it all the same (local file systems; NFS emulates
// flock with byte-range locks, which a read-only descriptor cannot take exclusively: Unsupported).
ExclusiveFileLock::ExclusiveFileLock(const std::filesystem::path& folder, const std::string& role, FolderItself) {
  fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TRIPOD_CHECK(fd_ >= 0, "cannot lock ", role, ": ", std::strerror(errno));
  state_ = try_lock(fd_, error_);
}

ExclusiveFileLock::~ExclusiveFileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace tripod
