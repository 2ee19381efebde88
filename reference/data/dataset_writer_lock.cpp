#include "data/dataset_writer_lock.h"

#include "core/error.h"

namespace tripod::data {
namespace fs = std::filesystem;

namespace {

// Before the lock: whether the folder existed decides the cleanup, and the lock file needs it.
bool create_folder(const fs::path& dir) {
  std::error_code ec;
  const bool created = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  TRIPOD_CHECK(!ec, "cannot create data directory ", dir.string(), ": ", ec.message());
  return created;
}

}  // namespace

DatasetWriterLock::DatasetWriterLock(const fs::path& dir, const std::string& command)
    : dir_(dir),
      created_(create_folder(dir)),
      lock_(dir / kDatasetLockFile,
            "the lock file " + (dir / kDatasetLockFile).string() + " of the dataset folder " + dir.string()) {
  TRIPOD_CHECK(lock_.state() != ExclusiveFileLock::State::HeldElsewhere, command, " --out ", dir.string(),
               ": another `tripod data prepare` or `data synthetic` is writing the dataset in this folder, and two "
               "at once delete and replace each other's files; wait for it to end, or give another --out");
}

DatasetWriterLock::~DatasetWriterLock() {
  if (!created_) return;
  // Never throws (a destructor, run while a failure unwinds): every step takes an error code.
  std::error_code ec;
  fs::directory_iterator entry(dir_, ec);
  for (; !ec && entry != fs::directory_iterator(); entry.increment(ec))
    if (entry->path().filename() != kDatasetLockFile) return;
  if (ec) return;
  fs::remove(dir_ / kDatasetLockFile, ec);
  fs::remove(dir_, ec);
}

}  // namespace tripod::data
