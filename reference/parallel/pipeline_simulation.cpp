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

namespace {

using Key = std::tuple<int, int, int>;  // (kind: 0 forward 1 backward, microbatch, chunk)

// Each micro-batch has exactly one forward and one backward of every chunk, on the chunk's rank.
void check_computes(const PipelineSchedule& s) {
  const int p = s.stages, chunks = s.stages * s.virtual_stages;
  std::map<Key, int> seen;
  for (int r = 0; r < p; ++r)
    for (const auto& a : s.ranks[static_cast<std::size_t>(r)])
      if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward) {
        TRIPOD_CHECK(a.chunk % p == r, "schedule: ", describe(a), " is on rank ", r, " but chunk ", a.chunk,
                     " lives on rank ", a.chunk % p);
        ++seen[{a.kind == ActionKind::Forward ? 0 : 1, a.microbatch, a.chunk}];
      }
  for (int kind = 0; kind < 2; ++kind)
    for (int mb = 0; mb < s.microbatches; ++mb)
      for (int c = 0; c < chunks; ++c)
        check(seen[{kind, mb, c}] == 1, "schedule: micro-batch ", mb, " has ", seen[{kind, mb, c}], " ",
              kind == 0 ? "forwards" : "backwards", " of chunk ", c, " (expected exactly one)");
}

// The simulated state: each rank's position in its action list and its clock, the messages sent
// and the computes finished so far.
class Simulation {
 public:
  explicit Simulation(const PipelineSchedule& s)
      : s_(s), p_(s.stages), chunks_(s.stages * s.virtual_stages), unit_(1.0 / s.virtual_stages),
        next_(static_cast<std::size_t>(p_), 0), clock_(static_cast<std::size_t>(p_), 0.0),
        in_flight_(static_cast<std::size_t>(p_), 0) {
    stats_.max_in_flight.assign(static_cast<std::size_t>(p_), 0);
    stats_.action_times.resize(static_cast<std::size_t>(p_));
  }

  // Runs rank r's actions in order until one blocks or none is left; returns whether any ran.
  bool advance(int r) {
    const std::size_t ri = static_cast<std::size_t>(r);
    auto& i = next_[ri];
    auto& t = clock_[ri];
    bool progressed = false;
    while (i < s_.ranks[ri].size()) {
      const PipelineAction& a = s_.ranks[ri][i];
      const double reached = t;  // a blocked action is retried later with the clock unchanged
      const bool compute = a.kind == ActionKind::Forward || a.kind == ActionKind::Backward;
      if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGradient) {
        send(r, a, t);
      } else if (a.kind == ActionKind::RecvActivation || a.kind == ActionKind::RecvGradient) {
        if (!receive(r, a, t)) break;  // blocks until the message arrives
      } else if (!run_compute(r, a, t)) {
        break;
      }
      if (!compute) stats_.action_times[ri].push_back({reached, t});
      ++i;
      progressed = true;
    }
    return progressed;
  }

  // Once no rank can advance: every rank must have run all its actions.
  ScheduleStats finish() {
    std::string stuck;
    for (int r = 0; r < p_; ++r) {
      const std::size_t ri = static_cast<std::size_t>(r);
      if (next_[ri] < s_.ranks[ri].size())
        stuck += " rank " + std::to_string(r) + " at " + describe(s_.ranks[ri][next_[ri]]);
    }
    check(stuck.empty(), "schedule ", schedule_kind_name(s_.kind), " deadlocks:", stuck);
    // A message nobody received: the sender's buffer would never be taken (and the step's data lost).
    if (!mailbox_.empty()) {
      const auto& [from, to, kind, mb, chunk] = mailbox_.begin()->first;
      fail("schedule ", schedule_kind_name(s_.kind), ": ", mailbox_.size(), " message(s) sent and never received, the "
           "first rank ", from, "'s ", kind == 0 ? "activation" : "gradient", " of micro-batch ", mb, " chunk ", chunk,
           " to rank ", to);
    }
    // 1F1B's memory promise: at most p - rank micro-batches in flight (and never more than m).
    if (s_.kind == ScheduleKind::OneFOneB)
      for (int r = 0; r < p_; ++r)
        check(stats_.max_in_flight[static_cast<std::size_t>(r)] <= std::min(p_ - r, s_.microbatches), "schedule 1f1b: ",
              "rank ", r, " holds ", stats_.max_in_flight[static_cast<std::size_t>(r)], " micro-batches in flight, more "
              "than 1F1B's ", std::min(p_ - r, s_.microbatches));
    const double makespan = *std::max_element(clock_.begin(), clock_.end());
    stats_.makespan = static_cast<int>(makespan * s_.virtual_stages + 0.5);
    stats_.bubble_fraction = 1.0 - busy_ / (p_ * makespan);
    return stats_;
  }

 private:
  // The rank a chunk's neighbour lives on: where an activation of `chunk` goes (chunk + 1) and a
  // gradient comes back from; -1 past either end of the model.
  int rank_of_chunk(int chunk) const { return chunk < 0 || chunk >= chunks_ ? -1 : chunk % p_; }

  // A message is known by its sender too, and must go to the rank of the chunk that takes it.
  void send(int r, const PipelineAction& a, double t) {
    const bool act = a.kind == ActionKind::SendActivation;
    const int to = rank_of_chunk(act ? a.chunk + 1 : a.chunk - 1);
    TRIPOD_CHECK(a.peer == to, "schedule: rank ", r, "'s ", describe(a), " goes to rank ", a.peer, ", but chunk ",
                 act ? a.chunk + 1 : a.chunk - 1, " lives on rank ", to);
    const bool fresh = mailbox_.emplace(std::make_tuple(r, a.peer, act ? 0 : 1, a.microbatch, a.chunk), t).second;
    TRIPOD_CHECK(fresh, "schedule: rank ", r, " sends ", describe(a), " twice");
  }

  // False while the message has not been sent; otherwise rank r's clock moves to its arrival and the
  // message is taken (a second receive of it waits for a message that never comes: a deadlock).
  bool receive(int r, const PipelineAction& a, double& t) {
    const bool act = a.kind == ActionKind::RecvActivation;
    const int sending_chunk = act ? a.chunk - 1 : a.chunk + 1;
    TRIPOD_CHECK(a.peer == rank_of_chunk(sending_chunk), "schedule: rank ", r, "'s ", describe(a), " waits on rank ",
                 a.peer, ", but chunk ", sending_chunk, " lives on rank ", rank_of_chunk(sending_chunk));
    auto it = mailbox_.find({a.peer, r, act ? 0 : 1, a.microbatch, sending_chunk});
    if (it == mailbox_.end()) return false;
    t = std::max(t, it->second);
    mailbox_.erase(it);
    return true;
  }

  // Runs a forward or backward once its dependencies are done (false while one is not).
  bool run_compute(int r, const PipelineAction& a, double& t) {
    const std::size_t ri = static_cast<std::size_t>(r);
    const bool fwd = a.kind == ActionKind::Forward, bwd = a.kind == ActionKind::Backward;
    // Dependencies: forward after the previous chunk's forward; backward after its own forward
    // and the next chunk's backward (or, for the last chunk, the loss of its own forward).
    std::vector<Key> needs;
    if (fwd && a.chunk > 0) needs.push_back({0, a.microbatch, a.chunk - 1});
    if (bwd) needs.push_back({0, a.microbatch, a.chunk});
    if (bwd && a.chunk + 1 < chunks_) needs.push_back({1, a.microbatch, a.chunk + 1});
    for (const Key& k : needs) {
      auto it = done_.find(k);
      if (it == done_.end()) return false;
      t = std::max(t, it->second);
    }
    const double duration = (fwd ? 1.0 : 2.0) * unit_;
    stats_.action_times[ri].push_back({t, t + duration});
    t += duration;
    busy_ += duration;
    done_[{fwd ? 0 : 1, a.microbatch, a.chunk}] = t;
    in_flight_[ri] += fwd ? 1 : -1;
    stats_.max_in_flight[ri] = std::max(stats_.max_in_flight[ri], in_flight_[ri]);
    return true;
  }

  const PipelineSchedule& s_;
  const int p_, chunks_;
  const double unit_;
  std::map<Key, double> done_;                                // finish time of each compute
  // (from, to, kind: 0 activation 1 gradient, mb, sending chunk) -> arrival; a receive takes its message
  std::map<std::tuple<int, int, int, int, int>, double> mailbox_;
  ScheduleStats stats_;
  std::vector<std::size_t> next_;
  std::vector<double> clock_;
  std::vector<int> in_flight_;
  double busy_ = 0;
};

}  // namespace

ScheduleStats validate_schedule(const PipelineSchedule& s) {
  check_computes(s);
  Simulation sim(s);
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int r = 0; r < s.stages; ++r)
      if (sim.advance(r)) progressed = true;
  }
  return sim.finish();
}

}  // namespace tripod
