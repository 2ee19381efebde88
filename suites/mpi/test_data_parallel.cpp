// Data parallelism and ZeRO 0-3 against the single-device reference, on every DP size that divides
// the world (the world is split into independent DP groups of that size).
//
// Tolerances are conform::compare's (stated and justified in conform/conformance.h): fp64 1e-10
// relative; fp32 1e-5 relative plus AdamW's amplification of rounding where gradients vanish.
//
// Bit-identity. With one micro-batch, ZeRO-1, -2 and -3 perform the same reduce-scatter of the
// same gradients, the same sharded norm and the same element-wise AdamW, so they must agree bit
// for bit. ZeRO-0 all-reduces instead; at DP=2 a sum of two numbers is the same in any order, so
// it must agree bit for bit too; at DP>2 Open MPI's all-reduce and reduce-scatter may add the
// ranks' contributions in different orders, so there it is held to the tolerances above.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/test_backend.h"
#include "mpi_test_util.h"
#include "comm/mpi_communicator.h"
#include "conform/conformance.h"
#include "train/distributed_trainer.h"

namespace tripod {
namespace {

using conform::bit_identical;
using conform::first_difference;
using conform::Trajectory;
constexpr int kSteps = 5;

// The conformance model (tied head, ignored targets, active clipping) in the given precision.
RunConfig config_for(const std::string& dtype) { return conform::default_conformance_config(dtype); }

Trajectory data_parallel(const RunConfig& config, Communicator& dp, int stage) {
  const int micro = static_cast<int>(config.train.micro_batches);
  return conform::run_layout(config, {1, 1, dp.size(), stage, micro}, dp, kSteps, testing::shared_test_backend());
}

void expect_close(const Trajectory& got, const Trajectory& ref, const RunConfig& config, const std::string& what) {
  const conform::Errors e = conform::compare(got, ref, config);
  EXPECT_TRUE(e.pass) << what << ": " << e.failure << " (loss rel " << e.loss_rel << ", norm rel " << e.norm_rel
                      << ", parameter rel " << e.param_rel << " in " << e.worst_param << ")";
}

class DataParallelEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(DataParallelEquivalence, EveryDpSizeAndZeroStageMatchesSingleDevice) {
  auto world = testing::test_world();
  const RunConfig config = config_for(GetParam());
  const Trajectory reference = conform::run_single_device(config, kSteps, testing::shared_test_backend());
  for (int dp_size : {1, 2, 4}) {
    if (world->size() % dp_size != 0) continue;
    auto dp = world->split(world->rank() / dp_size, world->rank(), "dp" + std::to_string(dp_size));
    std::vector<Trajectory> by_stage;
    for (int stage = 0; stage <= 3; ++stage) {
      by_stage.push_back(data_parallel(config, *dp, stage));
      expect_close(by_stage.back(), reference, config,
                   "dp=" + std::to_string(dp_size) + " zero=" + std::to_string(stage) + " " + GetParam());
    }
    EXPECT_TRUE(bit_identical(by_stage[1], by_stage[2]))
        << "ZeRO-1 vs ZeRO-2 at dp=" << dp_size << ": " << first_difference(by_stage[1], by_stage[2]);
    EXPECT_TRUE(bit_identical(by_stage[1], by_stage[3]))
        << "ZeRO-1 vs ZeRO-3 at dp=" << dp_size << ": " << first_difference(by_stage[1], by_stage[3]);
    if (dp_size <= 2) {
      EXPECT_TRUE(bit_identical(by_stage[0], by_stage[1]))
          << "ZeRO-0 vs ZeRO-1 at dp=" << dp_size << ": " << first_difference(by_stage[0], by_stage[1]);
    }
    if (world->rank() == 0)
      std::printf("[  INFO    ] %s dp=%d: ZeRO-0 %s ZeRO-1; loss error vs single device %.2e\n", GetParam().c_str(),
                  dp_size, bit_identical(by_stage[0], by_stage[1]) ? "bit-identical to" : "differs in rounding from",
                  conform::compare(by_stage[0], reference, config).loss_rel);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DataParallelEquivalence, ::testing::Values("fp64", "fp32"),
                         [](const auto& info) { return info.param; });

// Gradient accumulation over micro-batches under DP gives the same result as the full batch.
TEST(DataParallel, MicroBatchesMatchSingleDevice) {
  auto world = testing::test_world();
  if (world->size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  auto dp = world->split(world->rank() / 2, world->rank(), "dp2");
  nlohmann::json j = config_for("fp64").json;
  j["train"]["micro_batches"] = 2;
  const RunConfig micro = parse_run_config(j);
  const Trajectory reference = conform::run_single_device(config_for("fp64"), kSteps, testing::shared_test_backend());
  for (int stage = 0; stage <= 3; ++stage)
    expect_close(data_parallel(micro, *dp, stage), reference, micro, "micro=2 zero=" + std::to_string(stage));
}

// Per-rank bytes shrink as ZeRO promises: optimizer state by 1/dp from stage 1, gradients from
// stage 2, parameters at stage 3 (padding adds less than 16*dp elements per bucket).
TEST(DataParallel, MemoryShrinksByTheZeroFactors) {
  auto world = testing::test_world();
  const int n = world->size();
  nlohmann::json j = config_for("fp64").json;
  j["train"]["batch_size"] = 2 * n;
  const RunConfig config = parse_run_config(j);
  auto backend = testing::make_test_backend();
  const int64_t N = count_params(gpt_param_specs(config.model));
  ProcessGrid grid(*world, {1, 1, n});
  for (int stage = 0; stage <= 3; ++stage) {
    ParallelLayout data_parallel = testing::make_layout(1, 1, n, stage);
    data_parallel.bucket_bytes = 2048;
    DistributedTrainer trainer(config, *backend, grid, data_parallel);
    const ZeroMemory m = trainer.engine().memory();
    const ShardLayout& layout = trainer.engine().layout();
    const int64_t full = layout.total(), shard = layout.shard_elements();
    EXPECT_LT(full - N, static_cast<int64_t>(layout.buckets().size()) * n * ShardLayout::kAlignElements) << "padding";
    EXPECT_EQ(shard * n, full);
    const std::size_t b = 8;  // fp64
    EXPECT_EQ(m.optimizer, 2 * b * static_cast<std::size_t>(stage == 0 ? full : shard)) << "stage " << stage;
    EXPECT_EQ(m.params, b * static_cast<std::size_t>(stage == 3 ? shard : full)) << "stage " << stage;
    const std::size_t grads = stage == 0 ? full : stage == 1 ? full + shard : shard;
    EXPECT_EQ(m.grads, b * grads) << "stage " << stage;
  }
}

TEST(DataParallel, BadSettingsFailOnEveryRankWithoutHanging) {
  auto world = testing::test_world();
  auto backend = testing::make_test_backend();
  RunConfig config = config_for("fp32");
  const int n = world->size();
  ProcessGrid grid(*world, {1, 1, n});
  ParallelLayout zero4 = testing::make_layout(1, 1, n, 4), no_buckets = testing::make_layout(1, 1, n, 1);
  no_buckets.bucket_bytes = 0;
  EXPECT_THROW(DistributedTrainer(config, *backend, grid, zero4), Error);       // no ZeRO-4
  EXPECT_THROW(DistributedTrainer(config, *backend, grid, no_buckets), Error);  // zero-size buckets
  if (n > 1) {
    nlohmann::json j = config.json;
    j["train"]["batch_size"] = n + 1;  // does not divide among the ranks
    EXPECT_THROW(DistributedTrainer(parse_run_config(j), *backend, grid, testing::make_layout(1, 1, n, 0)), Error);
  }
  world->barrier();  // everybody got here: nobody is stuck in a collective
}

}  // namespace
}  // namespace tripod
