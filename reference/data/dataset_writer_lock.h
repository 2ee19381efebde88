// One writer at a time in a dataset's folder. Two `tripod data prepare` (or `data synthetic`) into
// one --out (the step of a job script that every task of `srun` runs, or the command started again
// while the first still ran) staged their tokenizers under one name and deleted each other's files:
// one said "prepared ... -> DIR", exit 0, and the folder was gone, removed by the other's cleanup;
// with other inputs, a tokenizer could end up beside another corpus's shards. The writer holds an
// exclusive lock on DIR/.lock (core/folder_writer_lock.h) from before it touches the folder to its
// end; a second is refused before any work.
#pragma once
#include <filesystem>
#include <string>

#include "core/folder_writer_lock.h"

namespace tripod::data {

inline constexpr const char* kDatasetLockFile = ".lock";

class DatasetWriterLock {
 public:
  // Creates `dir` where absent and takes its lock, or throws "COMMAND: another ... is writing the
  // dataset in DIR". Where the file system does not lock, holds nothing and says nothing (as `scale
  // run` does): the folder check still refuses other files.
  // A folder this writer created and that holds nothing else at the end (the work failed before
  // writing anything) goes with its lock file, as if never made.
  DatasetWriterLock(const std::filesystem::path& dir, const std::string& command);

 private:
  FolderWriterLock lock_;
};

}  // namespace tripod::data
