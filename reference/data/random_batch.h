// Random token batches for benchmarks, conformance runs and tests: tokens and targets uniform over
// the vocabulary, about `ignored_fraction` of the targets set to -1 (ignored), all from a counter
// RNG keyed by (seed, stream), so a batch depends only on its arguments.
#pragma once
#include <cstdint>
#include <string_view>

#include "data/batch_loader.h"

namespace tripod::data {

Batch random_token_batch(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, std::string_view stream,
                         double ignored_fraction = 0.0);

}  // namespace tripod::data
