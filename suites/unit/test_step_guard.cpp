// The anomaly guard's verdicts (train/step_guard.h): non-finite values are anomalies from the
// first step; a spike only over a full window of accepted losses, against their median; anomalous
// losses never enter the window; the policy decides skip or rollback until anomaly.max is passed.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "train/step_guard.h"

namespace tripod {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

AnomalySettings spikes(AnomalyPolicy policy, double factor, int64_t window, int64_t max = 10) {
  AnomalySettings s;
  s.policy = policy;
  s.spike_factor = factor;
  s.spike_window = window;
  s.max = max;
  return s;
}

TEST(StepGuard, TheDefaultStopsOnANonFiniteLossOrNormAndNothingElse) {
  StepGuard guard;
  EXPECT_EQ(guard.judge(4.0, 1.0).verdict, StepVerdict::Apply);
  EXPECT_EQ(guard.judge(400.0, 1e6).verdict, StepVerdict::Apply);  // no spike detection by default
  const StepJudgement nan_loss = guard.judge(kNaN, 1.0);
  EXPECT_EQ(nan_loss.verdict, StepVerdict::Stop);
  EXPECT_EQ(nan_loss.reason, "the loss is nan");
  const StepJudgement inf_norm = guard.judge(3.0, kInf);
  EXPECT_EQ(inf_norm.verdict, StepVerdict::Stop);
  EXPECT_EQ(inf_norm.reason, "the gradient norm is inf");
}

TEST(StepGuard, ASpikeIsJudgedOnlyOverAFullWindowAgainstItsMedian) {
  StepGuard guard(spikes(AnomalyPolicy::Skip, 2.0, 3));
  EXPECT_EQ(guard.judge(10.0, 1).verdict, StepVerdict::Apply);
  EXPECT_EQ(guard.judge(30.0, 1).verdict, StepVerdict::Apply);  // window not full: no spike yet
  EXPECT_EQ(guard.judge(4.0, 1).verdict, StepVerdict::Apply);   // window {10, 30, 4}: median 10
  EXPECT_EQ(guard.judge(20.0, 1).verdict, StepVerdict::Apply);  // 20 is not above 2 x 10
  // Window {30, 4, 20}: median 20; 41 > 40 is a spike, and does not enter the window.
  const StepJudgement spike = guard.judge(41.0, 1);
  EXPECT_EQ(spike.verdict, StepVerdict::Skip);
  EXPECT_NE(spike.reason.find("is a spike: above 2 x the median 20 of the last 3 accepted steps"), std::string::npos)
      << spike.reason;
  EXPECT_EQ(guard.judge(40.0, 1).verdict, StepVerdict::Apply);  // still against median 20: not above 40
  EXPECT_EQ(guard.anomalies(), 1);
}

TEST(StepGuard, RollbackAndSkipStopOnceMoreThanMaxAnomalies) {
  StepGuard guard(spikes(AnomalyPolicy::Rollback, 0, 1, /*max=*/2));
  EXPECT_EQ(guard.judge(kNaN, kNaN).verdict, StepVerdict::Rollback);
  EXPECT_EQ(guard.judge(1.0, kNaN).verdict, StepVerdict::Rollback);
  const StepJudgement third = guard.judge(kNaN, 1.0);
  EXPECT_EQ(third.verdict, StepVerdict::Stop);
  EXPECT_NE(third.reason.find("anomaly 3 of this run, more than anomaly.max (2)"), std::string::npos) << third.reason;
}

TEST(StepGuard, AnAppliedUpdateThatLeftTheStateNonFiniteRollsBackOnlyUnderRollback) {
  // An update already applied cannot be skipped: only a rollback undoes it.
  for (const AnomalyPolicy policy : {AnomalyPolicy::Stop, AnomalyPolicy::Skip}) {
    StepGuard guard(spikes(policy, 0, 1));
    const StepJudgement verdict = guard.judge_applied_update("its update left 1 infinite or NaN value");
    EXPECT_EQ(verdict.verdict, StepVerdict::Stop) << anomaly_policy_name(policy);
    EXPECT_EQ(verdict.reason, "its update left 1 infinite or NaN value");
    EXPECT_EQ(guard.anomalies(), 1);
  }
  StepGuard guard(spikes(AnomalyPolicy::Rollback, 0, 1, /*max=*/2));
  EXPECT_EQ(guard.judge_applied_update("a").verdict, StepVerdict::Rollback);
  EXPECT_EQ(guard.judge(kNaN, 1.0).verdict, StepVerdict::Rollback);  // one count for both kinds
  const StepJudgement third = guard.judge_applied_update("its update left 3 infinite or NaN values");
  EXPECT_EQ(third.verdict, StepVerdict::Stop);
  EXPECT_EQ(third.reason, "its update left 3 infinite or NaN values; that is anomaly 3 of this run, more than "
                          "anomaly.max (2)");
}

TEST(StepGuard, SettingsAreParsedAndCheckedNamingTheKey) {
  nlohmann::json a = {{"policy", "rollback"}, {"spike_factor", 4.0}, {"spike_window", 16}, {"skip_batches", 2}, {"max", 3}};
  const AnomalySettings s = parse_anomaly_settings(a);
  EXPECT_EQ(s.policy, AnomalyPolicy::Rollback);
  EXPECT_EQ(s.spike_factor, 4.0);
  EXPECT_EQ(s.spike_window, 16);
  EXPECT_EQ(s.skip_batches, 2);
  EXPECT_EQ(s.max, 3);
  a["spike_window"] = 0;
  EXPECT_THROW(parse_anomaly_settings(a), Error);
  a["spike_window"] = 16;
  a["policy"] = "ignore";
  EXPECT_THROW(parse_anomaly_settings(a), Error);
}

}  // namespace
}  // namespace tripod
