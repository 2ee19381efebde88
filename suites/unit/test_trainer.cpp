// Trainer behaviour: determinism, thread-count independence, gradient accumulation, the
// valid-token normalisation, the non-finite-loss guard, and the training forward that writes the
// loss gradient with the loss.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "support/test_backend.h"
#include "model_test_util.h"
#include "train/trainer.h"

namespace tripod {
namespace {

struct RunResult {
  std::vector<double> losses, norms, params;
};

RunResult run_steps(const RunConfig& config, int steps, int threads = 0) {
  const int saved_threads = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    StepResult step = trainer.train_step(testing::random_batch(config.train.batch_size, config.train.seq_len,
                                                               config.model.vocab_size, 100 + s));
    r.losses.push_back(step.loss);
    r.norms.push_back(step.grad_norm);
  }
  r.params = to_host_f64(*backend, trainer.params().flat());
  omp_set_num_threads(saved_threads);
  return r;
}

TEST(Trainer, SameSeedGivesBitIdenticalRuns) {
  for (const char* dtype : {"fp32", "fp64"}) {
    RunConfig config = testing::tiny_run_config(dtype, true);
    RunResult a = run_steps(config, 4), b = run_steps(config, 4);
    EXPECT_EQ(a.losses, b.losses) << dtype;
    EXPECT_EQ(a.norms, b.norms) << dtype;
    EXPECT_EQ(a.params, b.params) << dtype;
  }
}

TEST(Trainer, LossFallsOnARepeatedBatch) {
  RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  const data::Batch batch = testing::random_batch(4, 5, 11, 3);
  const double first = trainer.train_step(batch).loss;
  double last = first;
  for (int s = 0; s < 5; ++s) last = trainer.train_step(batch).loss;
  EXPECT_LT(last, first - 0.1);
}

// The kernels reduce in an order that does not depend on the thread count.
TEST(Trainer, ResultsDoNotDependOnThreadCount) {
  RunConfig config = testing::tiny_run_config("fp32", false);
  RunResult one = run_steps(config, 3, 1), two = run_steps(config, 3, 2);
  EXPECT_EQ(one.losses, two.losses);
  EXPECT_EQ(one.params, two.params);
}

// Micro-batching changes only the order in which per-sequence gradient contributions are added,
// so in fp64 the results agree to rounding (~1e-15 relative), not bit for bit.
TEST(Trainer, GradientAccumulationMatchesTheFullBatch) {
  RunResult full = run_steps(testing::tiny_run_config("fp64", true, 1), 3);
  RunResult micro = run_steps(testing::tiny_run_config("fp64", true, 4), 3);
  for (std::size_t i = 0; i < full.losses.size(); ++i) {
    EXPECT_NEAR(full.losses[i], micro.losses[i], 1e-12 * std::fabs(full.losses[i]));
    EXPECT_NEAR(full.norms[i], micro.norms[i], 1e-12 * std::fabs(full.norms[i]));
  }
  for (std::size_t i = 0; i < full.params.size(); ++i) EXPECT_NEAR(full.params[i], micro.params[i], 1e-12);
}

TEST(Trainer, LossIsNormalisedByValidTargets) {
  RunConfig config = testing::tiny_run_config("fp64", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  data::Batch batch = testing::random_batch(4, 5, 11, 5);
  LossSum s = trainer.model().forward(trainer.params(), batch.tokens.data(), batch.targets.data(), 4, 5);
  const double sum = read_scalar(*backend, s.sum);  // the slot's next forward overwrites it
  int64_t valid = 0;
  for (int32_t t : batch.targets) valid += t >= 0;
  ASSERT_LT(valid, 20);  // the batch does have ignored targets
  EXPECT_EQ(s.n_valid, valid);
  // Ignoring a target removes exactly its term from the sum.
  std::vector<double> per_token = to_host_f64(*backend, trainer.model().logits());  // keep logits alive
  const int32_t saved = batch.targets[0];
  batch.targets[0] = -1;
  LossSum fewer = trainer.model().forward(trainer.params(), batch.tokens.data(), batch.targets.data(), 4, 5);
  EXPECT_EQ(fewer.n_valid, valid - (saved >= 0 ? 1 : 0));
  EXPECT_LE(read_scalar(*backend, fewer.sum), sum);
}

// The trainer's forwards are told the backward's scale, and the single-device loss then writes its
// gradient in the forward's pass (LayerOps::loss_forward_with_gradient): the gradients must be
// those of a forward that leaves it to the backward, bit for bit, in every policy and both heads;
// a backward at another scale than the forward wrote is an error.
TEST(Trainer, AForwardToldItsBackwardsScaleGivesTheSameGradients) {
  for (const std::string dtype : {"fp64", "fp32", "bf16-mixed"})
    for (bool tied : {true, false}) {
      const RunConfig config = testing::tiny_run_config(dtype, tied);
      auto backend = testing::make_test_backend();
      Trainer trainer(config, *backend);
      trainer.initialise();
      const data::Batch batch = testing::random_batch(4, 5, config.model.vocab_size, 21);
      const double scale = 1.0 / 17;
      auto gradients = [&](std::optional<double> told) {
        backend->fill(trainer.grads().flat(), 0.0);
        const LossSum loss =
            trainer.model().forward(trainer.params(), batch.tokens.data(), batch.targets.data(), 4, 5, told);
        std::vector<double> out = {read_scalar(*backend, loss.sum)};
        trainer.model().backward(trainer.params(), trainer.grads(), scale);
        for (double g : to_host_f64(*backend, trainer.grads().flat())) out.push_back(g);
        return out;
      };
      const std::vector<double> apart = gradients(std::nullopt), together = gradients(scale);
      EXPECT_EQ(together, apart) << dtype << (tied ? " tied" : " untied");
      trainer.model().forward(trainer.params(), batch.tokens.data(), batch.targets.data(), 4, 5, scale);
      EXPECT_THROW(trainer.model().backward(trainer.params(), trainer.grads(), 2 * scale), Error) << dtype;
    }
}

TEST(Trainer, NonFiniteLossStopsWithTheStepNamed) {
  RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  trainer.train_step(testing::random_batch(4, 5, 11, 1));
  from_host_f64(*backend, {std::numeric_limits<double>::quiet_NaN()}, trainer.params()["ln_f.weight"].view(0, {1}));
  const std::vector<double> before = to_host_f64(*backend, trainer.params()["wte.weight"]);
  try {
    trainer.train_step(testing::random_batch(4, 5, 11, 2));
    FAIL() << "a NaN loss must stop training";
  } catch (const Error& e) {
    // The second step, counted from 1 as the log counts (the message once said "step 1").
    EXPECT_NE(std::string(e.what()).find("step 2: the loss is nan"), std::string::npos) << e.what();
  }
  EXPECT_EQ(before, to_host_f64(*backend, trainer.params()["wte.weight"])) << "parameters must be untouched";
}

// The gate's verdict: Skip leaves parameters and moments as they were but counts the step;
// Rollback counts nothing (the training loop reloads a checkpoint).
TEST(Trainer, SkippedAndRolledBackStepsLeaveTheStateUntouched) {
  RunConfig config = testing::tiny_run_config("fp32", true);
  auto backend = testing::make_test_backend();
  Trainer trainer(config, *backend);
  trainer.initialise();
  trainer.train_step(testing::random_batch(4, 5, 11, 1));
  const auto state = [&] {
    std::vector<double> all;
    for (const StateRegion& r : trainer.state_regions()) {
      const std::vector<double> v = to_host_f64(*backend, r.local);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const std::vector<double> before = state();
  const StepResult skipped = trainer.train_step(testing::random_batch(4, 5, 11, 2), [](double, double) {
    return StepJudgement{StepVerdict::Skip, "test"};
  });
  EXPECT_EQ(skipped.verdict, StepVerdict::Skip);
  EXPECT_EQ(trainer.step(), 2);
  EXPECT_EQ(before, state());
  const StepResult rolled = trainer.train_step(testing::random_batch(4, 5, 11, 3), [](double, double) {
    return StepJudgement{StepVerdict::Rollback, "test"};
  });
  EXPECT_EQ(rolled.anomaly, "test");
  EXPECT_EQ(trainer.step(), 2);
  EXPECT_EQ(before, state());
  trainer.train_step(testing::random_batch(4, 5, 11, 3));
  EXPECT_NE(before, state());
}

// AdamW's bias correction counts the updates applied, as torch's and Megatron-LM's optimizers do
// (a skipped step never reaches them): after a skipped step, the next update is the second, not the
// third. Under a constant learning rate, "apply, skip, apply B" leaves the state of "apply, apply B";
// the skipped step still advanced the step (and the schedule).
TEST(Trainer, ASkippedStepIsNoUpdateToAdamWsBiasCorrection) {
  RunConfig config = testing::tiny_run_config("fp64", true);
  config.schedule.decay = LrDecay::Constant;
  config.schedule.warmup_steps = 0;
  auto backend = testing::make_test_backend();
  const auto state = [&](Trainer& trainer) {
    std::vector<double> all;
    for (const StateRegion& r : trainer.state_regions()) {
      const std::vector<double> v = to_host_f64(*backend, r.local);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  Trainer skipping(config, *backend), straight(config, *backend);
  skipping.initialise();
  straight.initialise();
  skipping.train_step(testing::random_batch(4, 5, 11, 1));
  straight.train_step(testing::random_batch(4, 5, 11, 1));
  skipping.train_step(testing::random_batch(4, 5, 11, 2),
                      [](double, double) { return StepJudgement{StepVerdict::Skip, "test"}; });
  EXPECT_EQ(skipping.step(), 2);
  EXPECT_EQ(skipping.updates(), 1);
  skipping.train_step(testing::random_batch(4, 5, 11, 3));
  straight.train_step(testing::random_batch(4, 5, 11, 3));
  EXPECT_EQ(skipping.updates(), 2);
  EXPECT_EQ(state(skipping), state(straight));
}

}  // namespace
}  // namespace tripod
