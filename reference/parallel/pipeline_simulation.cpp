// validate_schedule: a discrete simulation of a pipeline schedule. Sends are buffered (they return
// at once, like isend), receives block until the matching message has arrived; a forward of a
// chunk takes 1/v time units and a backward 2/v, so a rank's busy time is 3m whatever v is.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"

namespace tripod {

ScheduleStats validate_schedule(const PipelineSchedule& s) {
  const int p = s.stages, chunks = s.stages * s.virtual_stages;
  using Key = std::tuple<int, int, int>;  // (kind: 0 forward 1 backward, microbatch, chunk)
  std::map<Key, double> done;                                        // finish time of each compute
  std::map<std::tuple<int, int, int, int>, double> mailbox;          // (to, kind, mb, chunk) -> arrival
  // Each micro-batch has exactly one forward and one backward of every chunk, on the chunk's rank.
  std::map<Key, int> seen;
  for (int r = 0; r < p; ++r)
    for (const auto& a : s.ranks[static_cast<std::size_t>(r)])
      if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward) {
        check(a.chunk % p == r, "schedule: ", describe(a), " is on rank ", r, " but chunk ", a.chunk, " lives on rank ",
              a.chunk % p);
        ++seen[{a.kind == ActionKind::Forward ? 0 : 1, a.microbatch, a.chunk}];
      }
  for (int kind = 0; kind < 2; ++kind)
    for (int mb = 0; mb < s.microbatches; ++mb)
      for (int c = 0; c < chunks; ++c)
        check(seen[{kind, mb, c}] == 1, "schedule: micro-batch ", mb, " has ", seen[{kind, mb, c}], " ",
              kind == 0 ? "forwards" : "backwards", " of chunk ", c, " (expected exactly one)");

  ScheduleStats stats;
  stats.max_in_flight.assign(static_cast<std::size_t>(p), 0);
  stats.action_times.resize(static_cast<std::size_t>(p));
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> clock(static_cast<std::size_t>(p), 0.0);
  std::vector<int> in_flight(static_cast<std::size_t>(p), 0);
  double busy = 0;
  const double unit = 1.0 / s.virtual_stages;
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int r = 0; r < p; ++r) {
      auto& i = next[static_cast<std::size_t>(r)];
      auto& t = clock[static_cast<std::size_t>(r)];
      while (i < s.ranks[static_cast<std::size_t>(r)].size()) {
        const PipelineAction& a = s.ranks[static_cast<std::size_t>(r)][i];
        const double reached = t;  // a blocked action is retried later with the clock unchanged
        const bool fwd = a.kind == ActionKind::Forward, bwd = a.kind == ActionKind::Backward;
        if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGradient) {
          mailbox[{a.peer, a.kind == ActionKind::SendActivation ? 0 : 1, a.microbatch, a.chunk}] = t;
        } else if (a.kind == ActionKind::RecvActivation || a.kind == ActionKind::RecvGradient) {
          const bool act = a.kind == ActionKind::RecvActivation;
          auto it = mailbox.find({r, act ? 0 : 1, a.microbatch, act ? a.chunk - 1 : a.chunk + 1});
          if (it == mailbox.end()) break;  // blocks until the message arrives
          t = std::max(t, it->second);
        } else {
          // Dependencies: forward after the previous chunk's forward; backward after its own forward
          // and the next chunk's backward (or, for the last chunk, the loss of its own forward).
          std::vector<Key> needs;
          if (fwd && a.chunk > 0) needs.push_back({0, a.microbatch, a.chunk - 1});
          if (bwd) needs.push_back({0, a.microbatch, a.chunk});
          if (bwd && a.chunk + 1 < chunks) needs.push_back({1, a.microbatch, a.chunk + 1});
          bool ready = true;
          for (const Key& k : needs) {
            auto it = done.find(k);
            if (it == done.end()) {
              ready = false;
              break;
            }
            t = std::max(t, it->second);
          }
          if (!ready) break;
          const double duration = (fwd ? 1.0 : 2.0) * unit;
          stats.action_times[static_cast<std::size_t>(r)].push_back({t, t + duration});
          t += duration;
          busy += duration;
          done[{fwd ? 0 : 1, a.microbatch, a.chunk}] = t;
          in_flight[static_cast<std::size_t>(r)] += fwd ? 1 : -1;
          stats.max_in_flight[static_cast<std::size_t>(r)] =
              std::max(stats.max_in_flight[static_cast<std::size_t>(r)], in_flight[static_cast<std::size_t>(r)]);
        }
        if (!fwd && !bwd) stats.action_times[static_cast<std::size_t>(r)].push_back({reached, t});
        ++i;
        progressed = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r)
    if (next[static_cast<std::size_t>(r)] < s.ranks[static_cast<std::size_t>(r)].size())
      stuck += " rank " + std::to_string(r) + " at " + describe(s.ranks[static_cast<std::size_t>(r)][next[static_cast<std::size_t>(r)]]);
  check(stuck.empty(), "schedule ", schedule_kind_name(s.kind), " deadlocks:", stuck);
  const double makespan = *std::max_element(clock.begin(), clock.end());
  stats.makespan = static_cast<int>(makespan * s.virtual_stages + 0.5);
  stats.bubble_fraction = 1.0 - busy / (p * makespan);
  return stats;
}

}  // namespace tripod
