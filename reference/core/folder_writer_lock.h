// One writer at a time in an output folder, taken before the writer touches it and held to its end;
// a second writer is refused before any work. Two writers into one --out (the step of a job script
// that every task of `srun` runs, or the command started again while the first still runs) wrote
// through the same staging names (FILE.tmp, opened with O_TRUNC, then renamed): two `export hf` of
// two checkpoints, raced four times, ended with one "cannot rename FILE.tmp: No such file" and the
// other exiting 0 over the first one's weights, every time.
//
// The lock is on a file in the folder (a dataset's `.lock`) or, where every file in the folder is
// the product (a Hugging Face export, a golden bundle), on the folder itself, leaving nothing in it.
#pragma once
#include <filesystem>
#include <string>

#include "core/file_lock.h"

namespace tripod {

class FolderWriterLock {
 public:
  // Creates `dir` where absent and takes its lock: on `lock_file` in it, or on the folder itself
  // when `lock_file` is empty. Throws `refusal` when another process holds it. Where the file system
  // does not lock, holds nothing and warns on stderr, naming the folder: the writers' own folder
  // checks still refuse other files.
  FolderWriterLock(const std::filesystem::path& dir, const std::string& lock_file, const std::string& refusal);
  // A folder this writer created and that holds nothing else at the end (the work failed before
  // writing anything) goes with its lock file, as if never made.
  ~FolderWriterLock();
  FolderWriterLock(const FolderWriterLock&) = delete;
  FolderWriterLock& operator=(const FolderWriterLock&) = delete;

 private:
  std::filesystem::path dir_;
  std::string lock_file_;
  bool created_ = false;
  ExclusiveFileLock lock_;
};

}  // namespace tripod
