// Stragglers: in synchronous training every rank's step takes as long as the slowest rank's, so the
// step time alone cannot name the slow one. What differs is how each rank spends it: the straggler
// works the whole step, the others wait for it in collectives. Each rank therefore keeps, per
// step, its wall time and its time waiting for peers (comm/comm_watchdog.h's comm_wait_seconds);
// every `every` steps the ranks gather their means over the window, and rank 0 writes them with
// the slowest rank (most own work per step) to the metrics JSONL:
//   {"event": "ranks", "step": 40, "steps": 10, "step_seconds": [..], "comm_wait_seconds": [..],
//    "busy_seconds": [..], "slowest_rank": 3, "slowest_busy_seconds": .., "median_busy_seconds": ..,
//    "straggler_ratio": 1.18}
// (per rank, means over the window; busy = step - wait; ratio = slowest busy / median busy).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"

namespace tripod {

struct RankTimes {
  int64_t step = 0;   // the step count at the gather
  int64_t steps = 0;  // steps in the window
  std::vector<double> step_seconds, comm_wait_seconds, busy_seconds;  // [ranks]
  int slowest_rank = 0;
  double slowest_busy_seconds = 0, median_busy_seconds = 0, straggler_ratio = 1;
};

// From per-rank means (pure; ties name the lowest rank).
RankTimes summarize_rank_times(int64_t step, int64_t steps, const std::vector<double>& step_seconds,
                               const std::vector<double>& comm_wait_seconds);
nlohmann::json rank_times_json(const RankTimes& t);
// "ranks: slowest 3, busy 12.1 ms/step vs median 10.2 ms (1.19x), waits 0.4 .. 2.3 ms/step"
std::string describe_rank_times(const RankTimes& t);

class RankTimer {
 public:
  // `world` may be null (one process: nothing is gathered); `every` 0 turns the gathers off.
  RankTimer(Communicator* world, int64_t every) : world_(world), every_(every) {}
  void step_begin();
  void step_end();  // the step's wall time is measured between the two calls
  // Collective over the world every `every` steps and at the `last` step (call after every step on
  // every rank, with the same arguments).
  std::optional<RankTimes> gather_if_due(int64_t step, bool last);

 private:
  Communicator* world_;
  int64_t every_;
  double wait_at_begin_ = 0, began_at_ = 0;
  double window_step_ = 0, window_wait_ = 0;
  int64_t window_steps_ = 0;
};

}  // namespace tripod
