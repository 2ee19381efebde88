#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tripod {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "cosine") return LrDecay::Cosine;
  if (name == "linear") return LrDecay::Linear;
  if (name == "constant") return LrDecay::Constant;
  fail("unknown LR decay '", name, "' (expected cosine, linear or constant)");
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == LrDecay::Constant) return max_lr;
  // A warm-up ending at the step before the last leaves the last step alone to decay (no steps
  // between): it takes min_lr, as the header promises, where max(1, 0) steps left it at max_lr.
  // A one-step run without warm-up has neither phase and trains at max_lr.
  const int64_t decay_steps = total_steps - 1 - warmup_steps;
  if (decay_steps <= 0) return warmup_steps > 0 ? min_lr : max_lr;
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / decay_steps, 0.0, 1.0);
  const double shape = decay == LrDecay::Cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
  return min_lr + (max_lr - min_lr) * shape;
}

}  // namespace tripod
