// Vocabulary padding (parallel/tp_vocab.h, tp_shard.h): each TP rank's rows rounded up to a
// multiple, as Megatron-LM's --make-vocab-size-divisible-by, whose padded sizes these match
// (GPT-2's 50257 -> 50304 at tp 1, 50432 at tp 2), and the shard maps that keep checkpoints in
// the real vocabulary.
#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "comm/self_communicator.h"
#include "model/param_spec.h"
#include "model_test_util.h"
#include "parallel/process_grid.h"
#include "parallel/tp_layers.h"
#include "parallel/tp_shard.h"
#include "parallel/tp_vocab.h"
#include "support/error_text.h"
#include "train/distributed_trainer.h"

namespace tripod {
namespace {

// Megatron's rule: the smallest multiple of multiple * tp that holds the vocabulary.
int64_t megatron_padded(int64_t vocab, int tp, int multiple) {
  const int64_t m = static_cast<int64_t>(multiple) * tp;
  return (vocab + m - 1) / m * m;
}

TEST(VocabPadding, PaddedSizesAreMegatrons) {
  EXPECT_EQ(tp::padded_vocab(50257, 1, 128), 50304);
  EXPECT_EQ(tp::padded_vocab(50257, 2, 128), 50432);
  EXPECT_EQ(tp::padded_vocab(50257, 8, 1), 50264);  // TP's own padding, as before
  for (int64_t vocab : {1, 11, 97, 50257, 65536})
    for (int tp : {1, 2, 3, 4, 8})
      for (int multiple : {1, 8, 16, 128})
        EXPECT_EQ(tp::padded_vocab(vocab, tp, multiple), megatron_padded(vocab, tp, multiple))
            << vocab << " " << tp << " " << multiple;
}

TEST(VocabPadding, ShardsCoverTheVocabularyOnceAndTheLastRanksMayHoldOnlyPadding) {
  // 97 rows over 8 ranks of 16: ranks 0-5 hold 16 real rows, rank 6 one, rank 7 none.
  int64_t covered = 0;
  for (int rank = 0; rank < 8; ++rank) {
    const tp::VocabShard s = tp::vocab_shard(97, 8, rank, 16);
    EXPECT_EQ(s.rows, 16);
    EXPECT_EQ(s.start, 16 * rank);
    EXPECT_EQ(s.valid(), rank < 6 ? 16 : rank == 6 ? 1 : 0);
    EXPECT_EQ(s.window().start, s.start);
    EXPECT_EQ(s.window().valid, s.valid());
    EXPECT_EQ(s.window().vocab, 97);
    covered += s.valid();
  }
  EXPECT_EQ(covered, 97);
  EXPECT_NE(error_of([] { tp::padded_vocab(97, 1, 0); }).find("padding multiple must be >= 1 (got 0)"),
            std::string::npos);
}

TEST(VocabPadding, TheParameterShardHoldsTheRealRowsAndNothingElse) {
  ModelConfig config;
  config.vocab_size = 97;
  config.d_model = 32;
  const ParamSpec* wte = nullptr;
  const std::vector<ParamSpec> specs = gpt_param_specs(config);
  for (const ParamSpec& spec : specs)
    if (spec.role == ParamRole::TokenEmbedding) wte = &spec;
  ASSERT_NE(wte, nullptr);
  const tp::TpShard one = tp::tp_shard(*wte, 1, 0, 128);  // one TP rank, padded
  EXPECT_EQ(one.local, (Shape{128, 32}));
  EXPECT_EQ(one.logical, (Shape{97, 32}));
  const std::vector<tp::ShardRun> runs = tp::shard_runs(one);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].local, 0);
  EXPECT_EQ(runs[0].logical, 0);
  EXPECT_EQ(runs[0].length, 97 * 32);
  EXPECT_EQ(tp::logical_index(one, 97 * 32 - 1), 97 * 32 - 1);
  EXPECT_EQ(tp::logical_index(one, 97 * 32), -1);  // the first padding element

  // Initial values: the real rows' are the full tensor's, the padding's 0.
  std::vector<double> full(97 * 32), local(128 * 32);
  initial_values(*wte, 5, 0, static_cast<int64_t>(full.size()), full.data());
  tp::init_local_shard(*wte, one, 5, local.data());
  EXPECT_TRUE(std::equal(full.begin(), full.end(), local.begin()));
  EXPECT_TRUE(std::all_of(local.begin() + 97 * 32, local.end(), [](double v) { return v == 0; }));
  EXPECT_EQ(tp::extract_shard(one, full), local);

  // Other tensors are not padded; rank 1 of 2 starts at row 64.
  for (const ParamSpec& spec : specs)
    if (spec.role != ParamRole::TokenEmbedding && spec.role != ParamRole::LmHead)
      EXPECT_EQ(tp::tp_shard(spec, 1, 0, 128).local, spec.shape) << spec.name;
  const tp::TpShard second = tp::tp_shard(*wte, 2, 1, 16);
  EXPECT_EQ(second.local, (Shape{64, 32}));
  EXPECT_EQ(tp::shard_runs(second).at(0).logical, 64 * 32);
  EXPECT_EQ(tp::shard_runs(second).at(0).length, 33 * 32);
}

// A padded vocabulary on one device (TensorParallelLayers of one rank: bench train's
// --make-vocab-size-divisible-by) keeps prepared operands as the single device's layers do: under
// bf16-mixed it trains the single device's model, and holds its activations (ln1, the attention
// output, ln2, gelu(fc) and lnf only as their bf16 GEMM operands) but for the logits' padding
// columns. Before, those layers kept none and the one-device padded runs missed every operand
// producer (their fp32 activations held, each GEMM operand rounded again).
TEST(VocabPadding, OnOneDeviceTheLayersKeepOperandsAsTheSingleDevicesDo) {
  RunConfig config = testing::tiny_run_config("bf16-mixed", true);
  config.model.vocab_size = 97;
  auto be = make_backend("cpu");
  Trainer single(config, *be);
  SelfCommunicator world("world", be.get());
  ParallelLayout layout;
  layout.vocab_multiple = 16;  // 97 -> 112
  ProcessGrid grid(world, layout.grid());
  DistributedTrainer padded(config, *be, grid, layout);
  single.initialise();
  padded.initialise();
  for (uint64_t step = 1; step <= 3; ++step) {
    const data::Batch batch = testing::random_batch(config.train.batch_size, config.train.seq_len, 97, step);
    // (the same model; the bits may differ by an ulp where OpenBLAS computes the padded width's
    // last columns with other kernels than the unpadded width's: see the README's vocabulary padding)
    const double want = single.train_step(batch).loss;
    EXPECT_NEAR(padded.train_step(batch).loss, want, 1e-6 * want) << "step " << step;
  }
  const int64_t tokens = config.train.batch_size * config.train.seq_len;
  const int64_t logits_padding = tokens * (112 - 97) * 2;  // bf16 logits, [N, 112] against [N, 97]
  const int64_t vocab_parallel_lse = tokens * 4;           // the vocab-parallel loss's [N] logsumexp, held
  EXPECT_EQ(static_cast<int64_t>(padded.memory().activations) - static_cast<int64_t>(single.memory().activations),
            logits_padding + vocab_parallel_lse);

  tp::TensorParallelLayers one(config.model, grid.tp(), false, nullptr, 16);
  EXPECT_TRUE(one.keeps_prepared_inputs());
}

}  // namespace
}  // namespace tripod
