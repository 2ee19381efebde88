// conform::compare's bounds: fp64 1e-10 relative; fp32 1e-5 relative plus lr*K*1e-3 plus twice the
// tensor's measured rounding floor (reference/conform/conformance.h). Each bound is shown to pass
// just inside and fail just outside, so none of them can be silently widened.
#include <gtest/gtest.h>

#include <cmath>

#include "conform/conformance.h"
#include "conform/op_checks.h"
#include "conform/suite_layouts.h"
#include "model/param_spec.h"
#include "support/test_backend.h"

namespace tripod {
namespace {

// A trajectory of the conformance model's shape with every parameter element set to `value`.
conform::Trajectory flat_trajectory(const RunConfig& config, double value) {
  conform::Trajectory t;
  t.losses = {4.5, 4.4};
  t.norms = {1.2, 1.1};
  for (const ParamSpec& spec : gpt_param_specs(config.model)) {
    std::size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<std::size_t>(d);
    t.params.emplace_back(n, value);
  }
  return t;
}

std::size_t index_of(const RunConfig& config, const std::string& name) {
  const std::vector<ParamSpec> specs = gpt_param_specs(config.model);
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return i;
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

// The learning-rate schedule spans the steps the suite runs: train.steps was fixed at 5, so
// --steps 60 trained 55 steps at min_lr (1/100 of the lr) while the fp32 bound's slack grew with K.
TEST(ConformanceCompare, TheScheduleSpansTheStepsTheSuiteRuns) {
  conform::SuiteOptions o;
  o.steps = 60;
  const RunConfig config = conform::suite_config(o, true);
  EXPECT_EQ(config.train.steps, 60);
  EXPECT_GT(config.schedule.at(40), 10 * config.schedule.min_lr);  // still well above min_lr
}

TEST(ConformanceCompare, Fp64IsOneInTenToTheTenRelative) {
  const RunConfig config = conform::default_conformance_config("fp64");
  const conform::Trajectory ref = flat_trajectory(config, 0.5);
  conform::Trajectory got = ref;
  got.params[3][7] += 0.4e-10;  // 0.8e-10 of the tensor's largest element
  EXPECT_TRUE(conform::compare(got, ref, config).pass);
  got.params[3][7] += 0.2e-10;
  const conform::Errors e = conform::compare(got, ref, config);
  EXPECT_FALSE(e.pass);
  EXPECT_GT(e.error_over_bound, 1.0);
  got = ref;
  got.losses[1] = std::nan("");
  EXPECT_FALSE(conform::compare(got, ref, config).pass);
}

// A NaN is infinitely far from every value. The parameters' largest difference was taken with
// std::max, which keeps its first argument against a NaN: a layout whose final update left one
// parameter element NaN (no later loss sees it) passed, as did a NaN in the reference itself.
TEST(ConformanceCompare, ANaNParameterFailsInEitherTrajectory) {
  for (const char* dtype : {"fp64", "fp32"}) {
    const RunConfig config = conform::default_conformance_config(dtype);
    const conform::Trajectory ref = flat_trajectory(config, 0.5);
    const std::size_t fc = index_of(config, "h.1.mlp.c_fc.weight");
    conform::Trajectory got = ref;
    got.params[fc][5] = std::nan("");
    conform::Errors e = conform::compare(got, ref, config);
    EXPECT_FALSE(e.pass) << dtype;
    EXPECT_EQ(e.failure, "parameter h.1.mlp.c_fc.weight") << dtype;
    EXPECT_EQ(e.param_abs, INFINITY) << dtype;  // the report says how far, not the finite elements' worst
    EXPECT_EQ(e.worst_param, "h.1.mlp.c_fc.weight") << dtype;
    e = conform::compare(ref, got, config);
    EXPECT_FALSE(e.pass) << dtype;
    // the same for a rounding floor measured against a NaN: it must not loosen or hide anything
    const conform::RoundingFloor floor = conform::rounding_floor(got, ref);
    EXPECT_EQ(floor.params[fc], INFINITY) << dtype;
    got = ref;
    got.norms[0] = std::nan("");
    e = conform::compare(got, ref, config);
    EXPECT_FALSE(e.pass) << dtype;
    EXPECT_EQ(e.norm_abs, INFINITY) << dtype;
  }
}

TEST(ConformanceCompare, TheOperatorChecksCountANonFiniteValueOnEitherSideAsInfinitelyFar) {
  double worst_abs = 0;
  EXPECT_DOUBLE_EQ(conform::worst_relative({1.0, 2.5}, {1.0, 2.0}, worst_abs), 0.25);
  EXPECT_DOUBLE_EQ(worst_abs, 0.5);
  // A NaN in the reference (the unsplit kernel) passed: max(scale, NaN) and max(worst, NaN) kept
  // their first arguments, and the finite elements' error was reported.
  for (const double bad : {NAN, INFINITY, -INFINITY}) {
    EXPECT_EQ(conform::worst_relative({1.0, 2.0}, {1.0, bad}, worst_abs), INFINITY) << bad;
    EXPECT_EQ(worst_abs, INFINITY) << bad;
    EXPECT_EQ(conform::worst_relative({bad, 2.0}, {1.0, 2.0}, worst_abs), INFINITY) << bad;
  }
  EXPECT_EQ(conform::worst_relative({INFINITY}, {INFINITY}, worst_abs), INFINITY);  // agreeing is no pass
}

TEST(ConformanceCompare, Fp32AddsAdamSlackAndTwiceTheRoundingFloor) {
  const RunConfig config = conform::default_conformance_config("fp32");
  const double slack = config.schedule.max_lr * 2 * 1e-3;  // K = 2 steps
  const conform::Trajectory ref = flat_trajectory(config, 0.5);
  const std::size_t wte = index_of(config, "wte.weight");
  conform::Trajectory got = ref;
  got.params[wte][11] += 0.5 * 1e-5 + 0.99 * slack;
  EXPECT_TRUE(conform::compare(got, ref, config).pass);
  got.params[wte][11] += 0.02 * slack;
  conform::Errors e = conform::compare(got, ref, config);
  EXPECT_FALSE(e.pass);
  EXPECT_EQ(e.failure, "parameter wte.weight");

  // A floor of 3e-4 on wte (an fp64 reference 3e-4 away) allows 6e-4 more there, and nowhere else.
  conform::Trajectory fp64 = ref;
  fp64.params[wte][40] += 3e-4;
  const conform::RoundingFloor floor = conform::rounding_floor(ref, fp64);
  EXPECT_NEAR(floor.params[wte], 3e-4, 1e-15);
  got = ref;
  got.params[wte][11] += 0.5 * 1e-5 + slack + 5.9e-4;
  EXPECT_TRUE(conform::compare(got, ref, config, floor).pass);
  got.params[wte][11] += 0.2e-4;
  EXPECT_FALSE(conform::compare(got, ref, config, floor).pass);
  got = ref;
  got.params[wte + 1][11] += 0.5 * 1e-5 + slack + 1e-6;
  e = conform::compare(got, ref, config, floor);
  EXPECT_FALSE(e.pass) << "the floor of one tensor must not loosen another";
}

// bf16-mixed's loss floor at a step is the largest distance from fp64 up to that step, not that
// step's own: where the two losses cross, the separation is not gone. Later steps never loosen
// earlier ones.
TEST(ConformanceCompare, Bf16LossFloorKeepsTheLargestSeparationSoFar) {
  const RunConfig config = conform::default_conformance_config("bf16-mixed");
  conform::Trajectory ref = flat_trajectory(config, 0.5);
  ref.losses = {4.5, 4.4, 4.3, 4.2};
  ref.norms = {1.2, 1.1, 1.0, 0.9};
  conform::Trajectory fp64 = ref;
  fp64.losses = {4.5 + 1e-5, 4.4 + 8e-4, 4.3 - 2e-5, 4.2 + 1e-4};  // crosses at step 2
  fp64.norms = {1.2 + 3e-4, 1.1, 1.0, 0.9};
  const conform::RoundingFloor floor = conform::rounding_floor(ref, fp64);
  ASSERT_EQ(floor.losses.size(), 4u);
  EXPECT_NEAR(floor.losses[0], 1e-5, 1e-12);
  EXPECT_NEAR(floor.losses[2], 8e-4, 1e-12);
  EXPECT_NEAR(floor.losses[3], 8e-4, 1e-12);
  EXPECT_NEAR(floor.norms[3], 3e-4, 1e-12);

  conform::Trajectory got = ref;
  got.losses[2] += 1e-5 * 4.3 + 2 * 8e-4 - 1e-6;  // just inside at the crossing step
  EXPECT_TRUE(conform::compare(got, ref, config, floor).pass) << conform::compare(got, ref, config, floor).failure;
  got.losses[2] += 2e-6;
  EXPECT_EQ(conform::compare(got, ref, config, floor).failure, "loss at step 2");
  got = ref;
  got.losses[0] += 1e-5 * 4.5 + 2 * 1e-5 + 1e-6;  // step 0 keeps its own, smaller floor
  EXPECT_EQ(conform::compare(got, ref, config, floor).failure, "loss at step 0");
}

// The floor of the real conformance model: the fp32 reference's largest distance from the fp64 one.
// Rounding moves the untied embedding far more than anything else (a token whose first gradient is
// ~1e-7, near Adam's eps, so its relative rounding error becomes an update error), and even that
// stays two orders below one step's update of a real bug (~lr).
TEST(ConformanceCompare, RoundingFloorOfTheConformanceModelIsSmallAgainstOneStep) {
  Backend& backend = testing::shared_test_backend();
  for (bool tied : {true, false}) {
    RunConfig fp32 = conform::default_conformance_config("fp32");
    nlohmann::json j = fp32.json;
    j["model"]["tie_embeddings"] = tied;
    fp32 = parse_run_config(j);
    j["train"]["dtype"] = "fp64";
    const RunConfig fp64 = parse_run_config(j);
    const conform::RoundingFloor floor = conform::rounding_floor(conform::run_single_device(fp32, 5, backend),
                                                              conform::run_single_device(fp64, 5, backend));
    double largest = 0;
    for (double f : floor.params) largest = std::max(largest, f);
    EXPECT_GT(largest, 0.0) << "fp32 and fp64 runs cannot agree bit for bit";
    EXPECT_LT(largest, 0.02 * fp32.schedule.max_lr) << (tied ? "tied" : "untied");
  }
}

}  // namespace
}  // namespace tripod
