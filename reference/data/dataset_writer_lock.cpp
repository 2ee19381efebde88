#include "data/dataset_writer_lock.h"

namespace tripod::data {

DatasetWriterLock::DatasetWriterLock(const std::filesystem::path& dir, const std::string& command)
    : lock_(dir, kDatasetLockFile,
            command + " --out " + dir.string() +
                ": another `tripod data prepare` or `data synthetic` is writing the dataset in this folder, and two "
                "at once delete and replace each other's files; wait for it to end, or give another --out") {}

}  // namespace tripod::data
