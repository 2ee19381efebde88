// Deterministic, resumable batches: sample i is a pure function of (dataset, seq_len, seed, i).
//
// The corpus is cut into num_windows = (size - 1) / seq_len non-overlapping windows; window w holds
// tokens [w*seq_len, w*seq_len + seq_len] (seq_len + 1 tokens: inputs plus the shifted target).
// Global sample i belongs to epoch e = i / num_windows and reads window perm_e(i % num_windows),
// where perm_e is a seeded random permutation of the windows. Training step s with global batch B
// reads samples(s*B, B); a data-parallel rank r of dp takes samples(s*B + r*B/dp, B/dp), which are
// the same samples whatever the layout, and resuming at step s needs no loader state.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/token_dataset.h"

namespace tripod::data {

struct Batch {
  int64_t batch = 0, seq_len = 0;
  std::vector<int32_t> tokens;   // [batch, seq_len] row-major
  std::vector<int32_t> targets;  // [batch, seq_len]: tokens shifted left by one position
};

class BatchLoader {
 public:
  // `data` must outlive the loader.
  BatchLoader(const TokenDataset& data, int64_t seq_len, uint64_t seed);
  BatchLoader(BatchLoader&&) noexcept;
  BatchLoader& operator=(BatchLoader&&) noexcept;
  ~BatchLoader();

  int64_t num_windows() const { return num_windows_; }
  int64_t seq_len() const { return seq_len_; }

  // Which window global sample `sample` reads (its first token is window * seq_len).
  int64_t window_of_sample(int64_t sample) const;

  // `count` consecutive global samples starting at `first_sample`.
  Batch samples(int64_t first_sample, int64_t count) const;

 private:
  struct PermutationCache;  // the last epoch's permutation, behind a mutex
  const TokenDataset* data_;
  int64_t seq_len_;
  int64_t num_windows_;
  uint64_t seed_;
  std::unique_ptr<PermutationCache> cache_;
};

// The epoch's window order: a Fisher-Yates shuffle driven by a counter-based generator keyed by
// (seed, epoch), so it is the same on every platform and compiler.
std::vector<int64_t> epoch_window_order(int64_t num_windows, uint64_t seed, int64_t epoch);

}  // namespace tripod::data
