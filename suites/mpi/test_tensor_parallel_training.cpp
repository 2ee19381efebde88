// Tensor parallelism in training: per-rank parameter bytes against the formula (split tensors hold
// 1/tp of their logical size, the vocabulary padded to a multiple of tp; LayerNorms, row-parallel
// biases and wpe are held whole), and a TP x DP x ZeRO run against the single-device reference.
// (`tripod conform` on 8 ranks runs every TP x DP x ZeRO x micro-batch layout; see test_conform.py.)
#include <gtest/gtest.h>

#include "support/test_backend.h"
#include "mpi_test_util.h"
#include "comm/mpi_communicator.h"
#include "conform/conformance.h"
#include "parallel/tp_shard.h"
#include "parallel/tp_vocab.h"
#include "train/distributed_trainer.h"

namespace tripod {
namespace {

TEST(TensorParallelTraining, ParameterBytesShrinkByTpForSplitLayers) {
  auto world = testing::test_world();
  const RunConfig config = conform::default_conformance_config("fp64");
  const int64_t V = config.model.vocab_size, C = config.model.d_model;
  for (int t : {2, 4}) {
    if (world->size() % t != 0) continue;
    auto group = world->split(world->rank() / t, world->rank(), "tp");  // dp = 1: only TP shards the parameters
    ProcessGrid grid(*group, {t, 1, 1});
    auto backend = testing::make_test_backend();
    DistributedTrainer trainer(config, *backend, grid, testing::make_layout(t, 1, 1, 0));
    int64_t expected = 0, logical = 0;
    for (const ParamSpec& spec : gpt_param_specs(config.model)) {
      const int64_t n = shape_numel(spec.shape);
      logical += n;
      if (spec.role == ParamRole::TokenEmbedding || spec.role == ParamRole::LmHead) expected += tp::padded_vocab(V, t) / t * C;
      else if (tp::tp_replicated(spec)) expected += n;
      else expected += n / t;
    }
    int64_t held = 0;
    for (const Bucket& b : trainer.engine().layout().buckets()) held += b.used;
    EXPECT_EQ(held, expected) << "tp=" << t;
    EXPECT_LT(held, logical / t + logical / 10) << "tp=" << t << ": the split layers dominate";
    EXPECT_EQ(trainer.engine().memory().params, 8u * static_cast<std::size_t>(trainer.engine().layout().total()));
  }
}

TEST(TensorParallelTraining, TpDpZeroMatchSingleDevice) {
  auto world = testing::test_world();
  if (world->size() % 4 != 0) GTEST_SKIP() << "needs 4 ranks per replica";
  const RunConfig config = conform::default_conformance_config("fp64");
  const conform::Trajectory reference = conform::run_single_device(config, 5, testing::shared_test_backend());
  auto group = world->split(world->rank() / 4, world->rank(), "tp2dp2");
  for (int zero : {0, 1}) {
    const conform::Trajectory got = conform::run_layout(config, {2, 1, 2, zero, 1}, *group, 5, testing::shared_test_backend());
    const conform::Errors e = conform::compare(got, reference, config);
    EXPECT_TRUE(e.pass) << "tp2 dp2 zero" << zero << ": " << e.failure << " (parameter rel " << e.param_rel << ")";
  }
}

TEST(TensorParallelTraining, HeadsNotDividingFailOnEveryRank) {
  auto world = testing::test_world();
  if (world->size() < 3) GTEST_SKIP();
  auto tp = world->split(world->rank() < 3 ? 0 : -1, world->rank(), "tp3");
  if (tp) {
    const RunConfig config = conform::default_conformance_config("fp64");  // 4 heads
    auto backend = testing::make_test_backend();
    ProcessGrid grid(*tp, {3, 1, 1});
    EXPECT_THROW(DistributedTrainer(config, *backend, grid, testing::make_layout(3, 1, 1, 0)), Error);
  }
  world->barrier();
}

}  // namespace
}  // namespace tripod
