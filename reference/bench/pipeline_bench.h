// tripod bench pipeline (under mpirun -np P): the pipeline executor on a balanced synthetic stage
// workload - each forward sleeps --forward-ms, each backward twice that, divided by v when a rank
// holds v chunks - so the measured bubble can be set against the theory, (p-1)/(m+p-1) for AFAB and
// 1F1B and (p-1)/(v*m+p-1) interleaved. Real messages move between the ranks (a small boundary
// tensor per micro-batch), so latencies and the executor's own overhead are in the measurement.
// Sleeping leaves the cores free, so oversubscribed ranks on a small machine still overlap.
//   mpirun -np 4 tripod bench pipeline --microbatches 4,8 --json pipeline.json --trace timeline.json
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/world.h"

namespace tripod::bench {

struct PipelineBenchOptions {
  std::vector<int> microbatches = {4, 8};
  std::string json_out, trace_out, backend = "cpu";
  CommSettings comm;
  double forward_ms = 10;
  int repeats = 3;
};

void run_pipeline_bench(const PipelineBenchOptions& options);

}  // namespace tripod::bench
