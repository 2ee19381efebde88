#include "train/training_engine.h"

#include <cmath>

#include "core/error.h"

namespace tripod {

bool judge_step(const StepGate& gate, int64_t step, StepResult& r,
                const std::function<std::string()>& nonfinite_gradients) {
  const StepJudgement judgement = gate(r.loss, r.grad_norm);
  r.verdict = judgement.verdict;
  r.anomaly = judgement.reason;
  if (judgement.verdict == StepVerdict::Stop) {
    const bool bad_gradients = std::isfinite(r.loss) && !std::isfinite(r.grad_norm);
    fail("step ", step + 1, ": ", judgement.reason, " (training diverged",
         bad_gradients ? "; non-finite gradients: " + nonfinite_gradients() : std::string(),
         "); parameters were not updated with this step's gradients");
  }
  return judgement.verdict == StepVerdict::Apply;
}

}  // namespace tripod
