// BatchLoader: samples are a pure function of (data, seq_len, seed, index), whatever the layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/batch_loader.h"
#include "data/token_dataset.h"

namespace tripod::data {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kTokens = 1001, kSeqLen = 10;  // 100 windows

// A dataset whose token at position p is p, so every window names itself.
class DataBatchLoader : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tripod_loader_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<int32_t> tokens(kTokens);
    std::iota(tokens.begin(), tokens.end(), 0);
    nlohmann::json splits;
    splits["train"] = write_split_shards(dir_, "train", tokens, kTokens, 300);
    splits["tiny"] = write_split_shards(dir_, "tiny", std::vector<int32_t>{1, 2, 3}, kTokens, 300);
    write_dataset_meta(dir_, {{"format", "tripod-tokens"}, {"version", 1}, {"vocab_size", kTokens},
                              {"tokenizer", nullptr}, {"splits", splits}});
    data_ = new TokenDataset(TokenDataset::open(dir_, "train"));
  }
  static void TearDownTestSuite() {
    delete data_;
    fs::remove_all(dir_);
  }
  static inline fs::path dir_;
  static inline const TokenDataset* data_ = nullptr;
};

std::vector<int64_t> windows_of(const Batch& batch) {
  std::vector<int64_t> windows;
  for (int64_t row = 0; row < batch.batch; ++row) windows.push_back(batch.tokens[row * batch.seq_len] / kSeqLen);
  return windows;
}

TEST_F(DataBatchLoader, CutsNonOverlappingWindows) {
  const BatchLoader loader(*data_, kSeqLen, 7);
  EXPECT_EQ(loader.num_windows(), 100);
  const Batch batch = loader.samples(0, 100);
  EXPECT_EQ(batch.batch, 100);
  EXPECT_EQ(batch.seq_len, kSeqLen);
  ASSERT_EQ(batch.tokens.size(), 1000u);
  for (int64_t row = 0; row < batch.batch; ++row) {
    EXPECT_EQ(batch.tokens[row * kSeqLen] % kSeqLen, 0) << "row " << row;
    for (int64_t j = 0; j < kSeqLen; ++j) {
      const auto at = row * kSeqLen + j;
      EXPECT_EQ(batch.targets[at], batch.tokens[at] + 1) << "targets are the tokens shifted by one";
      if (j > 0) EXPECT_EQ(batch.tokens[at], batch.tokens[at - 1] + 1);
    }
  }
}

TEST_F(DataBatchLoader, SameSeedSameSamplesOtherSeedOtherSamples) {
  const BatchLoader a(*data_, kSeqLen, 7), b(*data_, kSeqLen, 7), c(*data_, kSeqLen, 8);
  EXPECT_EQ(a.samples(0, 32).tokens, b.samples(0, 32).tokens);
  EXPECT_EQ(a.samples(250, 32).targets, b.samples(250, 32).targets);
  EXPECT_NE(a.samples(0, 32).tokens, c.samples(0, 32).tokens);
}

TEST_F(DataBatchLoader, DataParallelSlicesReassembleTheGlobalBatch) {
  const BatchLoader loader(*data_, kSeqLen, 3);
  constexpr int64_t kGlobalBatch = 16;
  for (int64_t step : {0, 5, 6, 12}) {  // steps 6 and 12 cross epoch boundaries (100 windows)
    const Batch whole = loader.samples(step * kGlobalBatch, kGlobalBatch);
    for (int64_t dp : {1, 2, 4, 8, 16}) {
      std::vector<int32_t> tokens, targets;
      for (int64_t rank = 0; rank < dp; ++rank) {
        const Batch part = BatchLoader(*data_, kSeqLen, 3).samples(step * kGlobalBatch + rank * kGlobalBatch / dp,
                                                                   kGlobalBatch / dp);
        tokens.insert(tokens.end(), part.tokens.begin(), part.tokens.end());
        targets.insert(targets.end(), part.targets.begin(), part.targets.end());
      }
      EXPECT_EQ(tokens, whole.tokens) << "step " << step << " dp " << dp;
      EXPECT_EQ(targets, whole.targets) << "step " << step << " dp " << dp;
    }
  }
}

TEST_F(DataBatchLoader, ResumingNeedsNoHistory) {
  const BatchLoader trained(*data_, kSeqLen, 11);
  std::vector<Batch> history;
  for (int64_t step = 0; step < 40; ++step) history.push_back(trained.samples(step * 8, 8));
  const BatchLoader resumed(*data_, kSeqLen, 11);
  for (int64_t step : {33, 2, 39, 17, 0}) {  // out of order, across epochs
    EXPECT_EQ(resumed.samples(step * 8, 8).tokens, history[step].tokens) << "step " << step;
  }
}

TEST_F(DataBatchLoader, EveryWindowOncePerEpochInADifferentOrder) {
  const BatchLoader loader(*data_, kSeqLen, 5);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order = windows_of(loader.samples(epoch * 100, 100));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(100);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << "epoch " << epoch << " is not a permutation of the windows";
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(loader.window_of_sample(epoch * 100 + i), order[i]);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST_F(DataBatchLoader, WindowOrderIsPinned) {
  // The order is part of the reproducibility contract (runs resumed or compared across machines
  // must read the same data); change these values only on purpose.
  const std::vector<int64_t> order = epoch_window_order(10, 42, 0);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(order, (std::vector<int64_t>{1, 3, 6, 0, 9, 7, 5, 2, 8, 4}));
}

TEST_F(DataBatchLoader, RejectsDataShorterThanOneSequence) {
  const TokenDataset tiny = TokenDataset::open(dir_, "tiny");
  try {
    BatchLoader loader(tiny, 3, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(dir_.string()), std::string::npos) << message;
    EXPECT_NE(message.find("3 tokens"), std::string::npos) << message;
  }
  EXPECT_EQ(BatchLoader(tiny, 2, 1).num_windows(), 1);
  EXPECT_THROW(BatchLoader(*data_, 0, 1), Error);
}

}  // namespace
}  // namespace tripod::data
