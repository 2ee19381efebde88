#include "ckpt/root_lock.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;

namespace {

// "pid 1234 on host node7 since 2026-12-06 20:31:05 UTC": what the holder writes into the file.
std::string holder_description() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char since[64];
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return "pid " + std::to_string(::getpid()) + " on host " + host + " since " + since;
}

// The holder's description from the file (its first line, at most 200 bytes), or "".
std::string read_holder(int fd) {
  char text[201] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return "";
  std::string line(text, static_cast<std::size_t>(n));
  return line.substr(0, line.find('\n'));
}

}  // namespace

RootLock::RootLock(const fs::path& root, const std::string& option)
    : lock_(root / kLockFile, "the lock file " + (root / kLockFile).string() + " of " + option + " " + root.string()) {
  const fs::path file = root / kLockFile;
  switch (lock_.state()) {
    case ExclusiveFileLock::State::HeldElsewhere: {
      const std::string holder = read_holder(lock_.fd());
      fail(option, " ", root.string(), ": another run is saving into this checkpoint root (",
           holder.empty() ? std::string("its holder is not written in ") + file.string() : holder,
           "); two runs in one root delete and replace each other's checkpoints. Wait for it to end, or give "
           "another folder; if that run is gone and a network file system still holds its lock (a lost node), "
           "remove ", file.string());
    }
    case ExclusiveFileLock::State::Unsupported:
      std::fprintf(stderr,
                   "tripod: warning: %s %s: its file system does not lock files (%s), so a second run saving into "
                   "the same root would not be noticed\n",
                   option.c_str(), root.c_str(), std::strerror(lock_.error()));
      std::fflush(stderr);
      return;
    case ExclusiveFileLock::State::Held:
      break;
  }
  const std::string holder = holder_description() + "\n";
  // Best effort: the lock itself is what excludes; the text only names the holder.
  if (::ftruncate(lock_.fd(), 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(lock_.fd(), holder.data(), holder.size(), 0);
  }
}

}  // namespace tripod::ckpt
