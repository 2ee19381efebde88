// What a step does when its loss or gradient norm is anomalous (the `anomaly` config section):
// a non-finite loss or gradient norm, or - with anomaly.spike_factor > 0 - a loss above
// spike_factor times the median of the last anomaly.spike_window accepted losses.
//
//   anomaly.policy = stop      the run stops with an error naming the step (the default)
//                    skip      the step's update is skipped (parameters and AdamW moments are left
//                              as they were); the step still counts, so the schedule and the data
//                              move on, but it is no update to AdamW's bias correction
//                    rollback  the training loop reloads the newest checkpoint under --save and
//                              continues from the batch after the bad one, plus
//                              anomaly.skip_batches more: replaying the batches since the
//                              checkpoint would, on a deterministic trainer, reproduce the spike
//
// Under rollback, an applied update that left the state infinite or NaN (found before a save,
// train/diverged_state.h) is an anomaly too (judge_applied_update).
//
// More than anomaly.max anomalies in a run stop it whatever the policy. The guard sees the
// all-reduced loss and norm, so every rank reaches the same verdict without communicating.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tripod {

enum class AnomalyPolicy { Stop, Skip, Rollback };

struct AnomalySettings {
  AnomalyPolicy policy = AnomalyPolicy::Stop;
  double spike_factor = 0;     // 0: no spike detection, only non-finite values are anomalies
  int64_t spike_window = 32;   // accepted losses the running median is taken over
  int64_t skip_batches = 0;    // rollback: further batches skipped after the bad one
  int64_t max = 10;            // anomalies tolerated in one run
};

// Parses the `anomaly` config section (throws naming the key on a bad value).
AnomalySettings parse_anomaly_settings(const nlohmann::json& section);
const char* anomaly_policy_name(AnomalyPolicy policy);

enum class StepVerdict { Apply, Skip, Rollback, Stop };

struct StepJudgement {
  StepVerdict verdict = StepVerdict::Apply;
  std::string reason;  // why the step is anomalous (empty when applied)
};

class StepGuard {
 public:
  explicit StepGuard(AnomalySettings settings = {}) : settings_(settings) {}

  // The verdict on a step with this loss and gradient norm. Accepted losses join the running
  // window; anomalous ones never do.
  StepJudgement judge(double loss, double grad_norm);
  // The verdict on a step whose update, already applied, left the state infinite or NaN (`why`
  // says where) with its loss and gradients finite: Rollback under that policy (within
  // anomaly.max), else Stop.
  StepJudgement judge_applied_update(const std::string& why);

  int64_t anomalies() const { return anomalies_; }
  // The window of accepted losses, oldest first, for a checkpoint; restore() takes it back (its
  // newest spike_window), so that a resumed or rolled-back run judges spikes from its first step
  // (the window had to fill again, spike_window steps without detection after every resume).
  std::vector<double> recent_losses() const { return {window_.begin(), window_.end()}; }
  void restore(const std::vector<double>& losses);
  const AnomalySettings& settings() const { return settings_; }

 private:
  double median_of_window() const;
  StepJudgement anomaly(std::string why);  // counts one; the policy's verdict, or Stop past anomaly.max

  AnomalySettings settings_;
  std::deque<double> window_;
  int64_t anomalies_ = 0;
};

}  // namespace tripod
