#include "core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tripod {

ExclusiveFileLock::ExclusiveFileLock(const std::filesystem::path& file, const std::string& role) {
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd_ >= 0, "cannot write ", role, ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
    state_ = State::Held;
    return;
  }
  error_ = errno;
  state_ = error_ == EWOULDBLOCK ? State::HeldElsewhere : State::Unsupported;
}

ExclusiveFileLock::~ExclusiveFileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace tripod
