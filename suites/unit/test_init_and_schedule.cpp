// Layout-independent initialisation (counter-based RNG) and the learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/counter_rng.h"
#include "model/param_spec.h"
#include "optim/lr_schedule.h"

namespace tripod {
namespace {

TEST(CounterRng, ValueDependsOnlyOnSeedNameAndIndex) {
  const CounterRng a(1, "h.0.attn.c_attn.weight"), b(1, "h.0.attn.c_attn.weight");
  const CounterRng other_name(1, "h.1.attn.c_attn.weight"), other_seed(2, "h.0.attn.c_attn.weight");
  EXPECT_EQ(a.normal(12345), b.normal(12345));
  EXPECT_NE(a.normal(12345), other_name.normal(12345));
  EXPECT_NE(a.normal(12345), other_seed.normal(12345));
  EXPECT_NE(a.normal(0), a.normal(1));
}

TEST(CounterRng, NormalsHaveMeanZeroAndUnitVariance) {
  const CounterRng rng(7, "stats");
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal(static_cast<uint64_t>(i));
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(n));  // 5 standard errors
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n));
}

// Any shard of any tensor, initialised on its own, equals the same slice of the full tensor.
TEST(Initialisation, ShardsMatchTheFullTensor) {
  ModelConfig config;
  for (const ParamSpec& spec : gpt_param_specs(config)) {
    const int64_t n = shape_numel(spec.shape);
    std::vector<double> full(static_cast<std::size_t>(n));
    initial_values(spec, 42, 0, n, full.data());
    for (int64_t parts : {2, 3, 7}) {
      for (int64_t p = 0; p < parts; ++p) {
        const int64_t first = n * p / parts, last = n * (p + 1) / parts;
        std::vector<double> shard(static_cast<std::size_t>(last - first));
        initial_values(spec, 42, first, last - first, shard.data());
        ASSERT_TRUE(std::equal(shard.begin(), shard.end(), full.begin() + first)) << spec.name << " part " << p;
      }
    }
  }
}

TEST(Initialisation, Gpt2StdAndResidualScaling) {
  ModelConfig config;
  config.n_layer = 8;
  for (const ParamSpec& spec : gpt_param_specs(config)) {
    if (spec.name.find("c_proj.weight") != std::string::npos) {
      EXPECT_DOUBLE_EQ(spec.init_std, 0.02 / std::sqrt(16.0)) << spec.name;
    } else if (spec.init == InitKind::Normal) {
      EXPECT_DOUBLE_EQ(spec.init_std, 0.02) << spec.name;
    }
  }
  const ParamSpec wte = gpt_param_specs(config)[0];
  std::vector<double> values(static_cast<std::size_t>(shape_numel(wte.shape)));
  initial_values(wte, 1, 0, shape_numel(wte.shape), values.data());
  double sum_sq = 0;
  for (double v : values) sum_sq += v * v;
  EXPECT_NEAR(std::sqrt(sum_sq / values.size()), 0.02, 0.002);
}

TEST(ParamSpecs, Gpt2SmallHas124MParameters) {
  ModelConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.d_model = 768;
  c.d_ff = 3072;
  c.vocab_size = 50257;
  c.context = 1024;
  EXPECT_EQ(count_params(gpt_param_specs(c)), 124439808);  // GPT-2 small, tied embeddings
}

TEST(LrSchedule, WarmupThenCosineToTheMinimumAtTheLastStep) {
  LrSchedule s{1e-3, 1e-4, 10, 110, LrDecay::Cosine};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_NEAR(s.at(59), 0.5 * (1e-3 + 1e-4), 1e-12 + 1e-3 * 0.01);
  EXPECT_DOUBLE_EQ(s.at(109), 1e-4);
  for (int64_t t = 10; t < 109; ++t) EXPECT_GE(s.at(t), s.at(t + 1));
}

TEST(LrSchedule, LinearDecayAndConstant) {
  LrSchedule lin{1.0, 0.0, 0, 11, LrDecay::Linear};
  EXPECT_DOUBLE_EQ(lin.at(0), 1.0);
  EXPECT_DOUBLE_EQ(lin.at(5), 0.5);
  EXPECT_DOUBLE_EQ(lin.at(10), 0.0);
  LrSchedule flat{2.0, 0.0, 2, 10, LrDecay::Constant};
  EXPECT_DOUBLE_EQ(flat.at(0), 1.0);
  EXPECT_DOUBLE_EQ(flat.at(9), 2.0);
  EXPECT_THROW(parse_lr_decay("exponential"), Error);
}

TEST(LrSchedule, AWarmUpEndingAtTheStepBeforeTheLastStillEndsAtTheMinimum) {
  // 6 steps, warm-up 5: the last step is the decay's only one. It stayed at max_lr (a decay of
  // max(1, 0) steps had made no progress), so the run never reached min_lr.
  for (const LrDecay decay : {LrDecay::Cosine, LrDecay::Linear}) {
    LrSchedule s{3e-3, 3e-4, 5, 6, decay};
    EXPECT_DOUBLE_EQ(s.at(4), 3e-3);
    EXPECT_DOUBLE_EQ(s.at(5), 3e-4);
  }
  // With no warm-up a one-step run has neither phase: max_lr, as before.
  EXPECT_DOUBLE_EQ((LrSchedule{3e-3, 3e-4, 0, 1, LrDecay::Cosine}.at(0)), 3e-3);
  // A warm-up as long as the run: the run ends warming up (train_loop says so at start-up).
  EXPECT_DOUBLE_EQ((LrSchedule{3e-3, 3e-4, 10, 4, LrDecay::Cosine}.at(3)), 1.2e-3);
}

}  // namespace
}  // namespace tripod
