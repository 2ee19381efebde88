// tripod bench overlap (under mpirun -np N): how much communication each overlap mechanism hides
// behind computation, every timing of the same model on every rank, interleaved in one run so that
// machine noise hits them alike (medians of --repeats):
//   compute       forward + backward with no communication at all (the baseline)
//   at end        ZeRO-0 with one bucket holding every gradient, all-reduced after backward
//   bucketed      ZeRO-0 buckets of --bucket-mb, each all-reduced as soon as backward finishes it
//   + split       the same with a tied wte's gradient reduced in two parts: the LM head's as soon as
//                 it is written, the lookup's token rows after backward (parallel/gradient_buckets.h)
//   + progress    the same with an MPI progress thread polling every --progress-us (comm/mpi_progress.h)
//   z3 on use     ZeRO-3 gathering each parameter bucket when it is needed (and reduce-scattering)
//   z3 prefetch   ZeRO-3 gathering --prefetch buckets ahead (parallel/param_gatherer.h)
// exposed = time - compute time (each the slowest rank's). Hidden by bucketing (and by the progress
// thread) = 1 - exposed / exposed(at end); hidden by prefetch = 1 - exposed(prefetch) / exposed(on use).
// The same fractions are also computed from the time a rank spends inside the engine's communication
// calls (ZeroEngine::communication_seconds, the rank with least, so that no wait for a slower peer
// counts): a direct measurement, far less noisy on a shared machine than a difference of two pass
// times, but blind to slowdowns communication causes outside the calls and to a progress thread's
// work. The last bucket's share of the bytes bounds what bucketing can hide: nothing is left to
// compute when it is ready; with the split, the second part's share bounds it instead.
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
  int progress_us = 200;  // the progress thread's polling interval (0: not measured)
  int prefetch = 1;       // ZeRO-3 buckets gathered ahead
  std::string json_out, backend = "cpu";
  CommSettings comm;
};

void run_overlap(const OverlapOptions& options);

}  // namespace tripod::bench
