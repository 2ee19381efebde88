#include "train/rank_timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "comm/comm_watchdog.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace tripod {

RankTimes summarize_rank_times(int64_t step, int64_t steps, const std::vector<double>& step_seconds,
                               const std::vector<double>& comm_wait_seconds) {
  check(!step_seconds.empty() && step_seconds.size() == comm_wait_seconds.size(),
        "rank times: ", step_seconds.size(), " step times and ", comm_wait_seconds.size(), " wait times");
  RankTimes t;
  t.step = step;
  t.steps = steps;
  t.step_seconds = step_seconds;
  t.comm_wait_seconds = comm_wait_seconds;
  for (std::size_t r = 0; r < step_seconds.size(); ++r)
    t.busy_seconds.push_back(std::max(0.0, step_seconds[r] - comm_wait_seconds[r]));
  t.slowest_rank = static_cast<int>(std::max_element(t.busy_seconds.begin(), t.busy_seconds.end()) - t.busy_seconds.begin());
  t.slowest_busy_seconds = t.busy_seconds[static_cast<std::size_t>(t.slowest_rank)];
  std::vector<double> sorted = t.busy_seconds;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  t.median_busy_seconds = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  t.straggler_ratio = t.median_busy_seconds > 0 ? t.slowest_busy_seconds / t.median_busy_seconds : 1;
  return t;
}

nlohmann::json rank_times_json(const RankTimes& t) {
  return {{"event", "ranks"},
          {"step", t.step},
          {"steps", t.steps},
          {"step_seconds", t.step_seconds},
          {"comm_wait_seconds", t.comm_wait_seconds},
          {"busy_seconds", t.busy_seconds},
          {"slowest_rank", t.slowest_rank},
          {"slowest_busy_seconds", t.slowest_busy_seconds},
          {"median_busy_seconds", t.median_busy_seconds},
          {"straggler_ratio", t.straggler_ratio}};
}

std::string describe_rank_times(const RankTimes& t) {
  const auto [least, most] = std::minmax_element(t.comm_wait_seconds.begin(), t.comm_wait_seconds.end());
  char line[256];
  std::snprintf(line, sizeof line,
                "ranks (last %lld steps): slowest %d, busy %.2f ms/step vs median %.2f ms (%.2fx); waits %.2f .. %.2f ms/step",
                static_cast<long long>(t.steps), t.slowest_rank, 1e3 * t.slowest_busy_seconds,
                1e3 * t.median_busy_seconds, t.straggler_ratio, 1e3 * *least, 1e3 * *most);
  return line;
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void RankTimer::step_begin() {
  wait_at_begin_ = comm_wait_seconds();
  began_at_ = now_seconds();
}

void RankTimer::step_end() {
  window_step_ += now_seconds() - began_at_;
  window_wait_ += comm_wait_seconds() - wait_at_begin_;
  ++window_steps_;
}

std::optional<RankTimes> RankTimer::gather_if_due(int64_t step, bool last) {
  if (!world_ || every_ <= 0 || window_steps_ == 0 || (step % every_ != 0 && !last)) return std::nullopt;
  // [ranks, 2] host table: (mean step seconds, mean wait seconds) of every rank.
  const int n = world_->size();
  Tensor mine = host_alloc({2}, DType::F64);
  Tensor all = host_alloc({2 * static_cast<int64_t>(n)}, DType::F64);
  mine.data<double>()[0] = window_step_ / static_cast<double>(window_steps_);
  mine.data<double>()[1] = window_wait_ / static_cast<double>(window_steps_);
  world_->all_gather(mine, all);
  const int64_t steps = window_steps_;
  window_step_ = window_wait_ = 0;
  window_steps_ = 0;
  std::vector<double> step_s(static_cast<std::size_t>(n)), wait_s(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    step_s[static_cast<std::size_t>(r)] = all.data<double>()[2 * r];
    wait_s[static_cast<std::size_t>(r)] = all.data<double>()[2 * r + 1];
  }
  return summarize_rank_times(step, steps, step_s, wait_s);
}

}  // namespace tripod
