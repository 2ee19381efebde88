#include "core/folder_writer_lock.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace tripod {
namespace fs = std::filesystem;

namespace {

// Before the lock: whether the folder existed decides the cleanup, and the lock needs the folder.
bool create_folder(const fs::path& dir) {
  std::error_code ec;
  const bool created = !fs::exists(dir, ec);
  TRIPOD_CHECK(created || fs::is_directory(dir, ec), dir.string(), " is a file, not a folder");
  fs::create_directories(dir, ec);
  TRIPOD_CHECK(!ec, "cannot create folder ", dir.string(), ": ", ec.message());
  return created;
}

ExclusiveFileLock lock_of(const fs::path& dir, const std::string& lock_file) {
  if (lock_file.empty()) return ExclusiveFileLock(dir, "the folder " + dir.string(), ExclusiveFileLock::FolderItself{});
  return ExclusiveFileLock(dir / lock_file, "the lock file " + (dir / lock_file).string() + " of the folder " + dir.string());
}

}  // namespace

FolderWriterLock::FolderWriterLock(const fs::path& dir, const std::string& lock_file, const std::string& refusal)
    : dir_(dir), lock_file_(lock_file), created_(create_folder(dir)), lock_(lock_of(dir, lock_file)) {
  TRIPOD_CHECK(lock_.state() != ExclusiveFileLock::State::HeldElsewhere, refusal);
  // Said, not fatal, as for checkpoint roots: the writers' own folder checks still refuse others'
  // files, and a network file system without its lock service must not stop the work.
  if (lock_.state() == ExclusiveFileLock::State::Unsupported) {
    std::fprintf(stderr,
                 "tripod: warning: %s: its file system does not lock files (%s), so a second writer into this "
                 "folder at the same time would not be refused\n",
                 dir.c_str(), std::strerror(lock_.error()));
    std::fflush(stderr);
  }
}

FolderWriterLock::~FolderWriterLock() {
  if (!created_) return;
  // Never throws (a destructor, run while a failure unwinds): every step takes an error code.
  std::error_code ec;
  fs::directory_iterator entry(dir_, ec);
  for (; !ec && entry != fs::directory_iterator(); entry.increment(ec))
    if (lock_file_.empty() || entry->path().filename() != lock_file_) return;
  if (ec) return;
  if (!lock_file_.empty()) fs::remove(dir_ / lock_file_, ec);
  fs::remove(dir_, ec);
}

}  // namespace tripod
