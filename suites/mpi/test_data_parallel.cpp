// Data parallelism and ZeRO 0-3 against the single-device reference, on every DP size that divides
// the world (the world is split into independent DP groups of that size).
//
// Tolerances. fp64: 1e-10 relative (the bound; observed ~1e-15), since DP changes only the
// order in which per-sequence gradient contributions are summed. fp32: the same reordering moves
// gradients by a few ulp (~1e-7 relative); losses and norms are compared at 1e-5 relative. Final
// fp32 parameters are compared at 1e-5 relative to the tensor's largest value plus lr*K*1e-3
// absolute: AdamW divides by sqrt(v)+eps, so a gradient element that is ~0 (e.g. the key bias,
// whose gradient vanishes exactly in exact arithmetic) turns rounding noise into an update of up
// to lr per step; 1e-3 of that bound is still 100x below a single step of a real bug.
//
// Bit-identity. With one micro-batch, ZeRO-1, -2 and -3 perform the same reduce-scatter of the
// same gradients, the same sharded norm and the same element-wise AdamW, so they must agree bit
// for bit. ZeRO-0 all-reduces instead; at DP=2 a sum of two numbers is the same in any order, so
// it must agree bit for bit too; at DP>2 Open MPI's all-reduce and reduce-scatter may add the
// ranks' contributions in different orders, so there it is held to the tolerances above.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../unit/model_test_util.h"
#include "comm/mpi_communicator.h"
#include "train/distributed_trainer.h"

namespace tripod {
namespace {

constexpr int kSteps = 5;

struct Trajectory {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> params;  // per tensor, logical (unpadded)
};

RunConfig config_for(const std::string& dtype) {
  RunConfig c = testing::tiny_run_config(dtype, /*tied=*/true);
  nlohmann::json j = c.json;
  j["train"]["batch_size"] = 8;
  j["optim"]["grad_clip"] = 0.5;  // small enough that clipping is active, so the norm matters
  return parse_run_config(j);
}

data::Batch batch_for(const RunConfig& c, int step) {
  return testing::random_batch(c.train.batch_size, c.train.seq_len, c.model.vocab_size, 900 + step);
}

Trajectory single_device(const RunConfig& config) {
  auto backend = make_cpu_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  Trajectory t;
  for (int s = 0; s < kSteps; ++s) {
    StepResult r = trainer.train_step(batch_for(config, s));
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
  }
  for (std::size_t i = 0; i < trainer.params().size(); ++i) t.params.push_back(to_host_f64(*backend, trainer.params().at(i)));
  return t;
}

Trajectory data_parallel(const RunConfig& config, Communicator& dp, int stage) {
  auto backend = make_cpu_backend();
  DistributedTrainer trainer(config, *backend, dp, {stage, /*bucket_bytes=*/2048});
  trainer.initialise();
  Trajectory t;
  for (int s = 0; s < kSteps; ++s) {
    StepResult r = trainer.train_step(batch_for(config, s));
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
  }
  t.params = trainer.gather_params();
  return t;
}

double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 1e-300;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

void expect_close(const Trajectory& got, const Trajectory& ref, const RunConfig& config, const std::string& what) {
  const bool fp64 = config.train.dtype == DType::F64;
  const double rtol = fp64 ? 1e-10 : 1e-5;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LE(std::fabs(got.losses[s] - ref.losses[s]), rtol * std::fabs(ref.losses[s])) << what << " loss, step " << s;
    EXPECT_LE(std::fabs(got.norms[s] - ref.norms[s]), rtol * std::fabs(ref.norms[s])) << what << " norm, step " << s;
  }
  ASSERT_EQ(got.params.size(), ref.params.size());
  const double adam_slack = fp64 ? 0.0 : config.schedule.max_lr * kSteps * 1e-3;
  for (std::size_t i = 0; i < ref.params.size(); ++i) {
    double scale = 1e-300, worst = 0;
    for (std::size_t j = 0; j < ref.params[i].size(); ++j) {
      scale = std::max(scale, std::fabs(ref.params[i][j]));
      worst = std::max(worst, std::fabs(got.params[i][j] - ref.params[i][j]));
    }
    EXPECT_LE(worst, rtol * scale + adam_slack) << what << " parameter tensor " << i << " max abs error " << worst;
  }
}

bool bit_identical(const Trajectory& a, const Trajectory& b) { return a.losses == b.losses && a.norms == b.norms && a.params == b.params; }

// Where two trajectories first differ, for the failure message.
std::string first_difference(const Trajectory& a, const Trajectory& b) {
  for (int s = 0; s < kSteps; ++s) {
    if (a.losses[s] != b.losses[s]) return "loss at step " + std::to_string(s);
    if (a.norms[s] != b.norms[s]) return "grad norm at step " + std::to_string(s);
  }
  for (std::size_t i = 0; i < a.params.size(); ++i)
    for (std::size_t j = 0; j < a.params[i].size(); ++j)
      if (a.params[i][j] != b.params[i][j])
        return "parameter tensor " + std::to_string(i) + " element " + std::to_string(j) + ": " +
               std::to_string(a.params[i][j]) + " vs " + std::to_string(b.params[i][j]);
  return "none";
}

class DataParallelEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(DataParallelEquivalence, EveryDpSizeAndZeroStageMatchesSingleDevice) {
  auto world = mpi_world();
  const RunConfig config = config_for(GetParam());
  const Trajectory reference = single_device(config);
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
                  max_relative(by_stage[0].losses, reference.losses));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DataParallelEquivalence, ::testing::Values("fp64", "fp32"),
                         [](const auto& info) { return info.param; });

// Gradient accumulation over micro-batches under DP gives the same result as the full batch.
TEST(DataParallel, MicroBatchesMatchSingleDevice) {
  auto world = mpi_world();
  if (world->size() % 2 != 0) GTEST_SKIP() << "needs an even world";
  auto dp = world->split(world->rank() / 2, world->rank(), "dp2");
  nlohmann::json j = config_for("fp64").json;
  j["train"]["micro_batches"] = 2;
  const RunConfig micro = parse_run_config(j);
  const Trajectory reference = single_device(config_for("fp64"));
  for (int stage = 0; stage <= 3; ++stage)
    expect_close(data_parallel(micro, *dp, stage), reference, micro, "micro=2 zero=" + std::to_string(stage));
}

// Per-rank bytes shrink as ZeRO promises: optimizer state by 1/dp from stage 1, gradients from
// stage 2, parameters at stage 3 (padding adds less than 16*dp elements per bucket).
TEST(DataParallel, MemoryShrinksByTheZeroFactors) {
  auto world = mpi_world();
  const int n = world->size();
  nlohmann::json j = config_for("fp64").json;
  j["train"]["batch_size"] = 2 * n;
  const RunConfig config = parse_run_config(j);
  auto backend = make_cpu_backend();
  const int64_t N = count_params(gpt_param_specs(config.model));
  for (int stage = 0; stage <= 3; ++stage) {
    DistributedTrainer trainer(config, *backend, *world, {stage, 2048});
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
  auto world = mpi_world();
  auto backend = make_cpu_backend();
  RunConfig config = config_for("fp32");
  EXPECT_THROW(DistributedTrainer(config, *backend, *world, {4, 2048}), Error);   // no ZeRO-4
  EXPECT_THROW(DistributedTrainer(config, *backend, *world, {1, 0}), Error);      // zero-size buckets
  if (world->size() > 1) {
    nlohmann::json j = config.json;
    j["train"]["batch_size"] = world->size() + 1;  // does not divide among the ranks
    EXPECT_THROW(DistributedTrainer(parse_run_config(j), *backend, *world, {0, 2048}), Error);
  }
  world->barrier();  // everybody got here: nobody is stuck in a collective
}

}  // namespace
}  // namespace tripod
