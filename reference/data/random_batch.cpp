#include "data/random_batch.h"

#include <algorithm>

#include "core/counter_rng.h"

namespace tripod::data {

Batch random_token_batch(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed, std::string_view stream,
                         double ignored_fraction) {
  const CounterRng rng(seed, stream);
  Batch b;
  b.batch = batch;
  b.seq_len = seq_len;
  auto token = [&](double u) { return static_cast<int32_t>(std::min<int64_t>(vocab - 1, static_cast<int64_t>(u * vocab))); };
  for (int64_t i = 0; i < batch * seq_len; ++i) {
    b.tokens.push_back(token(rng.uniform(3 * i)));
    const bool ignored = rng.uniform(3 * i + 1) < ignored_fraction;
    b.targets.push_back(ignored ? -1 : token(rng.uniform(3 * i + 2)));
  }
  return b;
}

}  // namespace tripod::data
