#include "train/step_guard.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace tripod {

AnomalySettings parse_anomaly_settings(const nlohmann::json& a) {
  AnomalySettings s;
  const std::string policy = a.at("policy").get<std::string>();
  if (policy == "stop") s.policy = AnomalyPolicy::Stop;
  else if (policy == "skip") s.policy = AnomalyPolicy::Skip;
  else if (policy == "rollback") s.policy = AnomalyPolicy::Rollback;
  else fail("anomaly.policy: stop, skip or rollback, not '", policy, "'");
  s.spike_factor = a.at("spike_factor");
  s.spike_window = a.at("spike_window");
  s.skip_batches = a.at("skip_batches");
  s.max = a.at("max");
  check(s.spike_factor == 0 || s.spike_factor > 1, "anomaly.spike_factor must be 0 (off) or above 1, not ",
        s.spike_factor);
  // Bounded as the checkpoint that keeps the window reads it (ckpt/manifest.cpp).
  check(s.spike_window >= 1 && s.spike_window <= (int64_t{1} << 20), "anomaly.spike_window must be in [1, 2^20] (got ",
        s.spike_window, ")");
  // Bounded: times the batch size, 2^63 - 1 batches wrapped the data position to sample 0.
  check(s.skip_batches >= 0 && s.skip_batches <= (int64_t{1} << 20), "anomaly.skip_batches must be in [0, 2^20] ",
        "(got ", s.skip_batches, ")");
  check(s.max >= 0, "anomaly.max must be >= 0");
  return s;
}

const char* anomaly_policy_name(AnomalyPolicy policy) {
  switch (policy) {
    case AnomalyPolicy::Stop: return "stop";
    case AnomalyPolicy::Skip: return "skip";
    case AnomalyPolicy::Rollback: return "rollback";
  }
  return "?";
}

double StepGuard::median_of_window() const {
  std::vector<double> v(window_.begin(), window_.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

StepJudgement StepGuard::judge(double loss, double grad_norm) {
  std::ostringstream why;
  if (!std::isfinite(loss)) {
    why << "the loss is " << loss;
  } else if (!std::isfinite(grad_norm)) {
    why << "the gradient norm is " << grad_norm;
  } else if (settings_.spike_factor > 0 && static_cast<int64_t>(window_.size()) == settings_.spike_window &&
             loss > settings_.spike_factor * median_of_window()) {
    // Only over a full window: the first steps' losses fall too fast for a median to mean much.
    why << "the loss " << loss << " is a spike: above " << settings_.spike_factor << " x the median "
        << median_of_window() << " of the last " << settings_.spike_window << " accepted steps";
  } else {
    window_.push_back(loss);
    if (static_cast<int64_t>(window_.size()) > settings_.spike_window) window_.pop_front();
    return {};
  }
  return anomaly(why.str());
}

void StepGuard::restore(const std::vector<double>& losses) {
  const std::size_t keep = std::min(losses.size(), static_cast<std::size_t>(settings_.spike_window));
  window_.assign(losses.end() - static_cast<std::ptrdiff_t>(keep), losses.end());
}

StepJudgement StepGuard::judge_applied_update(const std::string& why) {
  // An applied update cannot be skipped: only a rollback undoes it.
  if (settings_.policy != AnomalyPolicy::Rollback) {
    ++anomalies_;
    return {StepVerdict::Stop, why};
  }
  return anomaly(why);
}

StepJudgement StepGuard::anomaly(std::string why) {
  ++anomalies_;
  if (settings_.policy == AnomalyPolicy::Stop) return {StepVerdict::Stop, why};
  if (anomalies_ > settings_.max) {
    why += "; that is anomaly " + std::to_string(anomalies_) + " of this run, more than anomaly.max (" +
           std::to_string(settings_.max) + ")";
    return {StepVerdict::Stop, why};
  }
  return {settings_.policy == AnomalyPolicy::Skip ? StepVerdict::Skip : StepVerdict::Rollback, why};
}

}  // namespace tripod
