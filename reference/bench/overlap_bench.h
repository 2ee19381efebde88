// tripod bench overlap (under mpirun -np N): how much of the data-parallel gradient reduction
// hides behind backward. Three timings of the same forward+backward on every rank, in one run:
//   compute   backward with no reduction at all
//   bucketed  ZeRO-0 buckets of --bucket-mb, each all-reduced as soon as backward finishes it
//   at end    one bucket holding every gradient, all-reduced after backward (no overlap)
// exposed communication = time - compute time; hidden = 1 - exposed(bucketed) / exposed(at end).
// Open MPI has no progress thread: a non-blocking collective advances only inside MPI calls, which
// the ZeroEngine makes (test()) each time backward finishes a parameter group.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/world.h"

namespace tripod::bench {

struct OverlapOptions {
  std::string config = "small";
  std::vector<std::string> overrides;
  int64_t batch = 4, seq_len = 128, vocab = 8192, repeats = 7;
  double bucket_mb = 1.0;
  std::string json_out, backend = "cpu";
  CommSettings comm;
};

void run_overlap(const OverlapOptions& options);

}  // namespace tripod::bench
