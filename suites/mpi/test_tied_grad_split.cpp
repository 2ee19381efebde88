// A tied wte's gradient reduced in two parts (parallel/gradient_buckets.h): the LM head's part while
// backward goes on, then only the token rows the embedding lookup touched on some DP rank, and wpe.
// The two parts are summed over DP separately, so the result differs from the one-part reduction
// in rounding only: checked in fp64 for every ZeRO stage, with and without tensor parallelism and
// gradient accumulation. A dropped row, a row added twice or a missing wpe would be O(1) errors.
// An untied wte's gradient is the lookup's rows alone: where nothing has accumulated in its bucket
// (one micro-batch, or ZeRO-2/3) the first part is not sent at all, and otherwise the bucket is
// reduced once, as before; checked the same way, with pipelines too (the first stage's embedding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/test_backend.h"
#include "mpi_test_util.h"
#include "conform/conformance.h"
#include "train/distributed_trainer.h"

namespace tripod {
namespace {

constexpr int64_t kWidth = 32, kContext = 16;
constexpr int64_t kLargeVocab = 997;  // much larger than a batch's tokens

struct SplitRun {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> params;
  bool holds_embedding = true;  // this rank's stage holds the embedding (the first pipeline stage)
  int64_t split_elements = 0, first_elements = 0;  // of the embedding's engine
};

SplitRun run(bool split, const ParallelLayout& layout, Communicator& group, int64_t vocab = kLargeVocab,
             bool tied = true) {
  nlohmann::json j = conform::default_conformance_config("fp64").json;
  j["model"]["vocab_size"] = vocab;
  j["model"]["d_model"] = kWidth;
  j["model"]["context"] = kContext;
  j["model"]["tie_embeddings"] = tied;
  j["train"]["micro_batches"] = layout.micro_batches;
  j["train"]["split_tied_grad"] = split;
  const RunConfig config = parse_run_config(j);
  ProcessGrid grid(group, layout.grid());
  DistributedTrainer trainer(config, testing::shared_test_backend(), grid, layout);
  trainer.initialise();
  SplitRun r;
  for (int s = 0; s < 3; ++s) {
    const StepResult step = trainer.train_step(conform::conformance_batch(config, s));
    r.losses.push_back(step.loss);
    r.norms.push_back(step.grad_norm);
  }
  r.holds_embedding = grid.is_first_stage();
  r.split_elements = trainer.engine().last_split_elements();
  r.first_elements = trainer.engine().last_split_first_elements();
  r.params = trainer.gather_params();
  return r;
}

double relative_difference(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

void expect_split_matches(const ParallelLayout& layout, Communicator& group, int64_t vocab = kLargeVocab,
                          bool tied = true) {
  const std::string what = layout.name() + ", vocabulary " + std::to_string(vocab) + (tied ? ", tied" : ", untied");
  const SplitRun whole = run(false, layout, group, vocab, tied), split = run(true, layout, group, vocab, tied);
  EXPECT_EQ(whole.split_elements, 0) << what;
  const int64_t wpe = kContext * kWidth, wte_shard = (vocab + layout.tp - 1) / layout.tp * kWidth;
  if (!tied && layout.zero <= 1 && layout.micro_batches > 1) {
    // Earlier micro-batches' rows are in the untied bucket: it is reduced once, not in two parts.
    EXPECT_EQ(split.split_elements, 0) << what;
  } else if (split.holds_embedding) {
    // The first part: the head's, the whole bucket (tied; padded to divide among the DP ranks), or
    // nothing, since it was zero (untied).
    if (tied) {
      EXPECT_GE(split.first_elements, wte_shard + wpe) << what;
    } else {
      EXPECT_EQ(split.first_elements, 0) << what;
    }
    // The second part holds wpe and the union of the ranks' token rows of this TP rank's wte shard:
    // more than wpe (a batch touches some rows), far fewer than the shard's rows.
    EXPECT_GT(split.split_elements, wpe) << what;
    EXPECT_LE(split.split_elements, wpe + wte_shard) << what;
    if (vocab == kLargeVocab) {
      EXPECT_LT(split.split_elements, wpe + wte_shard / 2) << what;
    }
  }
  for (std::size_t s = 0; s < whole.losses.size(); ++s) {
    EXPECT_LE(relative_difference(split.losses[s], whole.losses[s]), 1e-13) << what << ", step " << s + 1;
    EXPECT_LE(relative_difference(split.norms[s], whole.norms[s]), 1e-12) << what << ", step " << s + 1;
  }
  ASSERT_EQ(split.params.size(), whole.params.size());
  double worst = 0;
  for (std::size_t t = 0; t < whole.params.size(); ++t)
    for (std::size_t i = 0; i < whole.params[t].size(); ++i)
      worst = std::max(worst, std::abs(split.params[t][i] - whole.params[t][i]));
  // lr 1e-2 for 3 steps moves a parameter by up to ~3e-2; rounding-level differences stay far below.
  EXPECT_LE(worst, 1e-12) << what;
}

// Two DP ranks, every ZeRO stage, with and without accumulation; a small vocabulary too: most rows
// touched, so rows straddle the edges of the ranks' slices.
void expect_every_zero_stage_at_dp2(bool tied) {
  auto world = testing::test_world();
  if (world->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto pair = world->split(world->rank() < 2 ? 0 : -1, world->rank(), "split2");
  if (pair)
    for (int64_t vocab : {kLargeVocab, int64_t{97}})
      for (int zero : {0, 1, 2, 3})
        for (int micro : {1, 2}) expect_split_matches(testing::make_layout(1, 1, 2, zero, micro), *pair, vocab, tied);
  world->barrier();
}

TEST(TiedGradSplit, MatchesTheWholeReductionOnEveryZeroStage) { expect_every_zero_stage_at_dp2(/*tied=*/true); }

TEST(TiedGradSplit, AnUntiedEmbeddingSendsOnlyItsRowsAndWpe) { expect_every_zero_stage_at_dp2(/*tied=*/false); }

TEST(TiedGradSplit, AnUntiedEmbeddingUnderTensorAndPipelineParallelism) {
  auto world = testing::test_world();
  if (world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  auto four = world->split(world->rank() < 4 ? 0 : -1, world->rank(), "split4");
  if (four)
    for (int zero : {1, 3}) {
      expect_split_matches(testing::make_layout(2, 1, 2, zero, 1), *four, kLargeVocab, /*tied=*/false);
      expect_split_matches(testing::make_layout(1, 2, 2, zero, 2), *four, kLargeVocab, /*tied=*/false);
    }
  world->barrier();
}

TEST(TiedGradSplit, MatchesUnderTensorParallelism) {  // each TP rank's rows of its vocabulary shard
  auto world = testing::test_world();
  if (world->size() < 4) GTEST_SKIP() << "needs 4 ranks";
  auto four = world->split(world->rank() < 4 ? 0 : -1, world->rank(), "split4");
  if (four)
    for (int zero : {0, 3}) expect_split_matches(testing::make_layout(2, 1, 2, zero, 2), *four);
  world->barrier();
}

// wpe is replicated over TP: its DP sum must take the same calls on every TP rank, although their
// vocabulary shards touch different numbers of rows (gather_params checks that the copies agree).
// Two ranks' sum is the same in any order, so this needs four DP ranks; and a small vocabulary, so
// that wpe's elements fall into different pieces of the ranks' reductions if it were packed with
// the rows (as it once was, and conform's tp2-pp1-dp4-z2-mb1-sp caught).
TEST(TiedGradSplit, ReplicatedTensorsStayEqualAcrossTensorParallelRanks) {
  auto world = testing::test_world();
  if (world->size() < 8) GTEST_SKIP() << "needs 8 ranks";
  auto eight = world->split(world->rank() < 8 ? 0 : -1, world->rank(), "split8");
  if (eight)
    for (bool sequence_parallel : {false, true}) {
      ParallelLayout layout = testing::make_layout(2, 1, 4, 2, 1);
      layout.sequence_parallel = sequence_parallel;
      expect_split_matches(layout, *eight, 97);
    }
  world->barrier();
}

TEST(TiedGradSplit, OneDataParallelRankDoesNotSplit) {  // nothing to reduce: the reference's arithmetic
  auto world = testing::test_world();
  auto one = world->split(world->rank() == 0 ? 0 : -1, world->rank(), "split1");
  if (one) {
    const SplitRun split = run(true, testing::make_layout(1, 1, 1, 0), *one);
    const SplitRun whole = run(false, testing::make_layout(1, 1, 1, 0), *one);
    EXPECT_EQ(split.split_elements, 0);
    EXPECT_EQ(split.losses, whole.losses);
    EXPECT_EQ(split.params, whole.params);
  }
  world->barrier();
}

}  // namespace
}  // namespace tripod
