// Learning-rate schedule: linear warm-up from 0 to max_lr over warmup_steps, then cosine or linear
// decay reaching min_lr exactly at the run's last step (total_steps - 1), as Chinchilla-style
// sweeps require (the decay is fitted to each run's own token budget).
#pragma once
#include <cstdint>
#include <string>

namespace tripod {

enum class LrDecay { Cosine, Linear, Constant };
LrDecay parse_lr_decay(const std::string& name);  // "cosine" | "linear" | "constant"

struct LrSchedule {
  double max_lr = 1e-3;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::Cosine;

  double at(int64_t step) const;  // step counts from 0
};

}  // namespace tripod
