// The run's metrics file (train.metrics): JSON Lines, one record a line, each flushed and checked as
// it is written, and held by one run at a time. Only rank 0 opens one; an unopened log writes nothing.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/file_lock.h"

namespace tripod {

class MetricsLog {
 public:
  // Creates the file's folder and opens `path`, appending (`append`: a resumed run continues its
  // records) or emptying it. Refuses a file that another run is writing: two experiments of one
  // preset started in one folder share its default path (runs/<preset>/metrics.jsonl), and their
  // records interleaved in it, the second run emptying the first's, each exiting 0. Where the file
  // system cannot lock, nothing is held and nothing said (the checkpoint root's lock warns about
  // that file system already).
  void open(const std::string& path, bool append);

  // One record, flushed and checked (a full disk lost every record after it while the run went on
  // and exited 0, when only the open was checked); `step` names when a failed write happened.
  void write(const nlohmann::json& record, int64_t step);

 private:
  std::string path_;
  std::optional<ExclusiveFileLock> lock_;  // held while out_ is written
  std::ofstream out_;
};

}  // namespace tripod
