// `tripod train` as a job: one process, or every rank of an MPI launch. Picks the backend, pins
// each rank's threads, validates the layout on every rank before any communication (every rank
// reports the same error and the job exits 1), builds the process grid and runs the training loop;
// an error during the run ends every rank.
#pragma once
#include <string>

#include "comm/world.h"
#include "parallel/parallel_layout.h"
#include "train/run_config.h"
#include "train/train_loop.h"

namespace tripod {

struct TrainJob {
  RunConfig config;
  TrainOptions options;
  ParallelLayout layout;  // dp 0: the world size / (tp * pp)
  bool parallel = false;  // run through MPI even on one rank (a layout was asked for)
  std::string backend = "cpu";
  CommSettings comm;  // --comm, --comm-timeout (multi-rank runs)
  std::string pipeline_trace;  // write the last step's pipeline timeline here
};

// Prints the run's summary on the reporting rank.
void run_train_job(const TrainJob& job);

}  // namespace tripod
