#include "train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace tripod {
namespace fs = std::filesystem;

void MetricsLog::open(const std::string& path, bool append) {
  if (fs::path(path).has_parent_path()) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    TRIPOD_CHECK(!ec, "cannot write metrics file ", path, " (train.metrics): its folder ",
                 fs::path(path).parent_path().string(), " cannot be made: ", ec.message());
  }
  // Locked before it is emptied, so that a refused run leaves the other's records as they were.
  lock_.emplace(path, "metrics file " + path + " (train.metrics)");
  TRIPOD_CHECK(lock_->state() != ExclusiveFileLock::State::HeldElsewhere, "train.metrics ", path,
               ": another run is writing this metrics file, and their records would interleave in it; give "
               "this run its own (--set train.metrics=FILE)");
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  check(out_.good(), "cannot write metrics file ", path, " (train.metrics): ", std::strerror(errno));
  path_ = path;
}

void MetricsLog::write(const nlohmann::json& record, int64_t step) {
  if (!out_.is_open()) return;
  out_ << record.dump() << "\n" << std::flush;
  TRIPOD_CHECK(out_.good(), "cannot write metrics file ", path_, " (train.metrics) after step ", step, ": ",
               std::strerror(errno));
}

}  // namespace tripod
