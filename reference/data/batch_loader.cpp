#include "data/batch_loader.h"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <string>

#include "core/counter_rng.h"
#include "core/error.h"

namespace tripod::data {

struct BatchLoader::PermutationCache {
  std::mutex mutex;
  int64_t epoch = -1;
  std::vector<int64_t> order;
};

std::vector<int64_t> epoch_window_order(int64_t num_windows, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<std::size_t>(num_windows));
  std::iota(order.begin(), order.end(), int64_t{0});
  const CounterRng rng(seed, "data.window_order.epoch_" + std::to_string(epoch));
  for (int64_t i = num_windows - 1; i > 0; --i) {
    // A uniform index in [0, i] from 64 random bits by multiply-high (bias below i/2^64); unlike
    // std::uniform_int_distribution this is specified exactly, so every platform agrees.
    const auto bits = rng.block(static_cast<uint64_t>(i));
    const uint64_t random64 = (static_cast<uint64_t>(bits[0]) << 32) | bits[1];
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(random64) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

BatchLoader::BatchLoader(const TokenDataset& data, int64_t seq_len, uint64_t seed)
    : data_(&data), seq_len_(seq_len), num_windows_(0), seed_(seed),
      cache_(std::make_unique<PermutationCache>()) {
  check(seq_len >= 1, "batch loader for ", data.dir(), ": seq_len must be positive (got ", seq_len, ")");
  check(data.size() >= seq_len + 1, "data directory ", data.dir(), " split \"", data.split(), "\" has ",
        data.size(), " tokens, too few for one sequence of seq_len ", seq_len, " (needs ", seq_len + 1, ")");
  num_windows_ = (data.size() - 1) / seq_len;
}

BatchLoader::BatchLoader(BatchLoader&&) noexcept = default;
BatchLoader& BatchLoader::operator=(BatchLoader&&) noexcept = default;
BatchLoader::~BatchLoader() = default;

int64_t BatchLoader::window_of_sample(int64_t sample) const {
  TRIPOD_CHECK(sample >= 0, "batch loader for ", data_->dir(), ": negative sample index ", sample);
  const int64_t epoch = sample / num_windows_;
  std::lock_guard lock(cache_->mutex);
  if (cache_->epoch != epoch) {
    cache_->order = epoch_window_order(num_windows_, seed_, epoch);
    cache_->epoch = epoch;
  }
  return cache_->order[static_cast<std::size_t>(sample % num_windows_)];
}

Batch BatchLoader::samples(int64_t first_sample, int64_t count) const {
  TRIPOD_CHECK(first_sample >= 0 && count >= 0, "batch loader for ", data_->dir(), ": bad sample range [", first_sample,
               ", +", count, ")");
  Batch batch;
  batch.batch = count;
  batch.seq_len = seq_len_;
  batch.tokens.resize(static_cast<std::size_t>(count * seq_len_));
  batch.targets.resize(batch.tokens.size());
  for (int64_t row = 0; row < count; ++row) {
    const int32_t* window = data_->tokens() + window_of_sample(first_sample + row) * seq_len_;
    std::copy_n(window, seq_len_, batch.tokens.begin() + row * seq_len_);
    std::copy_n(window + 1, seq_len_, batch.targets.begin() + row * seq_len_);
  }
  return batch;
}

}  // namespace tripod::data
