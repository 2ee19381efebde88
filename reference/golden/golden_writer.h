// `tripod golden --config FILE --steps K --out DIR`: cuts a golden bundle (golden/bundle.h,
// reports/FORMATS.md) from the first K steps of a Tripod run: the batches its data loader gives,
// weights initialised as the run would (rounded to fp32, so that both reference runs start from
// values every framework can load exactly), and the single-device trainer's results in fp32 and
// fp64, with the AdamW drift allowances a peer's parameters are checked with.
#pragma once
#include <filesystem>

#include "backend/backend.h"
#include "train/run_config.h"

namespace tripod::golden {

struct GoldenWriteSummary {
  int64_t steps = 0, parameters = 0, tokens_per_step = 0;
  double first_loss = 0, last_loss = 0;        // fp64 reference
  double fp32_worst_loss_rel_error = 0;        // Tripod's own fp32 against its fp64
};

// `out` must be new or empty. Throws tripod::Error naming the file on any failure.
GoldenWriteSummary write_golden_bundle(const RunConfig& config, int64_t steps, const std::filesystem::path& out,
                                       Backend& backend);

}  // namespace tripod::golden
