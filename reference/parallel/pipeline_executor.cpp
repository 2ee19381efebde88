#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/host_memory.h"

namespace tripod {
namespace {

// Tag of the message leaving `sender_chunk` for micro-batch mb: activations and gradients of every
// (micro-batch, chunk) pair are distinct, so a receive can only match the message it expects.
// check_message_tags has checked that they all fit.
int message_tag(const PipelineSchedule& s, int microbatch, int sender_chunk, bool gradient) {
  return (microbatch * s.stages * s.virtual_stages + sender_chunk) * 2 + (gradient ? 1 : 0);
}

const char* action_code(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward: return "F";
    case ActionKind::Backward: return "B";
    case ActionKind::SendActivation: return "send-act";
    case ActionKind::RecvActivation: return "recv-act";
    case ActionKind::SendGradient: return "send-grad";
    case ActionKind::RecvGradient: return "recv-grad";
  }
  return "?";
}

bool is_gradient_action(ActionKind k) {
  return k == ActionKind::Backward || k == ActionKind::SendGradient || k == ActionKind::RecvGradient;
}

// One rank's side of a pipeline step: the tensors received but not yet consumed, by (micro-batch,
// chunk), the receives posted ahead, the sends still in flight (each owning a pooled copy of its
// tensor until it completes), and the pool of free message buffers.
class RankExecution {
 public:
  RankExecution(const PipelineSchedule& schedule, const std::vector<PipelineAction>& actions, Communicator& pp,
                Backend& backend, const PipelineWork& work, bool forward_only, int receives_ahead)
      : schedule_(schedule), actions_(actions), pp_(pp), backend_(backend), work_(work),
        chunks_(schedule.stages * schedule.virtual_stages), forward_only_(forward_only),
        receives_ahead_(receives_ahead) {}

  bool skipped(const PipelineAction& a) const { return forward_only_ && is_gradient_action(a.kind); }

  void perform(std::size_t index) {
    const PipelineAction& a = actions_[index];
    switch (a.kind) {
      case ActionKind::Forward: forward(a); break;
      case ActionKind::Backward: backward(a); break;
      case ActionKind::SendActivation:
      case ActionKind::SendGradient: send(a); break;
      case ActionKind::RecvActivation:
      case ActionKind::RecvGradient: receive(index); break;
    }
  }

  // Starts the next receives of the action list (from `from` on) until receives_ahead are posted
  // and not yet taken.
  void post_receives(std::size_t from) {
    for (std::size_t i = std::max(from, next_to_post_); i < actions_.size(); ++i) {
      if (static_cast<int>(posted_.size()) >= receives_ahead_) return;
      next_to_post_ = i + 1;
      const PipelineAction& a = actions_[i];
      if (skipped(a) || (a.kind != ActionKind::RecvActivation && a.kind != ActionKind::RecvGradient)) continue;
      Posted p{pooled(), nullptr};
      p.request = pp_.recv_async(p.buffer, a.peer, receive_tag(a));
      posted_.emplace(i, std::move(p));
    }
  }

  // Sends complete while this rank computes only if MPI gets a chance to progress them; the
  // finished ones return their copies to the pool (1F1B's memory bound holds for the messages too).
  void release_completed_sends() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      if (!it->request->test()) {
        ++it;
        continue;
      }
      pool_.push_back(it->copy);
      it = sends_.erase(it);
    }
  }

  void wait_for_sends() {
    for (auto& s : sends_) s.request->wait();
  }

 private:
  using Received = std::map<std::pair<int, int>, Tensor>;
  struct Sending {
    Tensor copy;
    std::unique_ptr<CommRequest> request;
  };
  struct Posted {
    Tensor buffer;
    std::unique_ptr<CommRequest> request;
  };

  Tensor pooled() {
    if (pool_.empty()) return work_.boundary_buffer();
    Tensor t = pool_.back();
    pool_.pop_back();
    return t;
  }

  int receive_tag(const PipelineAction& a) const {
    const bool gradient = a.kind == ActionKind::RecvGradient;
    return message_tag(schedule_, a.microbatch, gradient ? a.chunk + 1 : a.chunk - 1, gradient);
  }

  void forward(const PipelineAction& a) {
    // Chunk 0 reads tokens; every other chunk's input arrived from the previous rank.
    if (a.chunk == 0) {
      work_.forward(a.microbatch, a.chunk, nullptr);
    } else {
      const Tensor input = take(activations_, a.microbatch, a.chunk);
      work_.forward(a.microbatch, a.chunk, &input);
      pool_.push_back(input);  // consumed: the stage copied what it needs
    }
  }

  void backward(const PipelineAction& a) {
    if (a.chunk == chunks_ - 1) {
      work_.backward(a.microbatch, a.chunk, nullptr);
    } else {
      const Tensor grad = take(gradients_, a.microbatch, a.chunk);
      work_.backward(a.microbatch, a.chunk, &grad);
      pool_.push_back(grad);
    }
  }

  void send(const PipelineAction& a) {
    const bool gradient = a.kind == ActionKind::SendGradient;
    Sending s{pooled(), nullptr};
    backend_.copy(gradient ? work_.input_grad(a.microbatch, a.chunk) : work_.output(a.microbatch, a.chunk), s.copy);
    s.request = pp_.send_async(s.copy, a.peer, message_tag(schedule_, a.microbatch, a.chunk, gradient));
    sends_.push_back(std::move(s));
  }

  void receive(std::size_t index) {
    const PipelineAction& a = actions_[index];
    Tensor buffer;
    if (auto it = posted_.find(index); it != posted_.end()) {  // started earlier: only wait for it
      it->second.request->wait();
      buffer = it->second.buffer;
      posted_.erase(it);
    } else {
      buffer = pooled();
      pp_.recv(buffer, a.peer, receive_tag(a));
    }
    (a.kind == ActionKind::RecvGradient ? gradients_ : activations_)[{a.microbatch, a.chunk}] = buffer;
  }

  Tensor take(Received& from, int mb, int chunk) {
    auto it = from.find({mb, chunk});
    check(it != from.end(), "pipeline rank ", pp_.rank(), ": micro-batch ", mb, " of chunk ", chunk,
          " computed before its input arrived (schedule out of order)");
    Tensor t = it->second;
    from.erase(it);
    return t;
  }

  const PipelineSchedule& schedule_;
  const std::vector<PipelineAction>& actions_;
  Communicator& pp_;
  Backend& backend_;
  const PipelineWork& work_;
  const int chunks_;
  const bool forward_only_;
  const int receives_ahead_;
  Received activations_, gradients_;
  std::map<std::size_t, Posted> posted_;  // by action index
  std::size_t next_to_post_ = 0;
  std::vector<Sending> sends_;
  std::vector<Tensor> pool_;
};

}  // namespace

void check_message_tags(const PipelineSchedule& s) {
  const int64_t tags = static_cast<int64_t>(s.microbatches) * s.stages * s.virtual_stages * 2;
  check(tags <= 32768, "pipeline: ", s.microbatches, " micro-batches x ", s.stages * s.virtual_stages,
        " chunks need ", tags, " message tags, more than the 32768 every MPI guarantees (use fewer micro-batches)");
}

// The executor hands a send the stage's buffer as it is when the send action runs, and stages reuse
// their buffers (the backward scratch holds d input until the next backward): so a send must
// directly follow the compute that produced its tensor. make_schedule's schedules do.
void check_executable(const PipelineSchedule& s) {
  check_message_tags(s);
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& actions = s.ranks[r];
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const ActionKind k = actions[i].kind;
      if (k != ActionKind::SendActivation && k != ActionKind::SendGradient) continue;
      const ActionKind producer = k == ActionKind::SendActivation ? ActionKind::Forward : ActionKind::Backward;
      TRIPOD_CHECK(i > 0 && actions[i - 1].kind == producer && actions[i - 1].microbatch == actions[i].microbatch &&
                       actions[i - 1].chunk == actions[i].chunk,
                   "pipeline schedule: rank ", r, "'s ", describe(actions[i]),
                   " does not directly follow the compute that ", "produces its tensor");
    }
  }
}

std::vector<ActionTiming> run_pipeline(const PipelineSchedule& schedule, Communicator& pp, Backend& backend,
                                       const PipelineWork& work, bool forward_only, int receives_ahead) {
  check(receives_ahead >= 0, "pipeline: receives posted ahead must be >= 0 (got ", receives_ahead, ")");
  // Neighbouring chunks on one rank (p = 1 with v > 1) would hand over without messages: not supported.
  check(schedule.stages > 1 || schedule.virtual_stages == 1, "pipeline: virtual stages need more than one stage");
  check(pp.size() == schedule.stages, "pipeline schedule for ", schedule.stages, " stages run on ", pp.name(),
        " of ", pp.size(), " ranks");
  check_executable(schedule);
  const auto& actions = schedule.ranks[static_cast<std::size_t>(pp.rank())];
  RankExecution execution(schedule, actions, pp, backend, work, forward_only, receives_ahead);

  std::vector<ActionTiming> timings;
  pp.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  execution.post_receives(0);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& a = actions[i];
    if (execution.skipped(a)) continue;
    ActionTiming timing{a, now(), 0};
    execution.perform(i);
    execution.post_receives(i + 1);
    execution.release_completed_sends();
    backend.synchronize();  // a device computes asynchronously: the action ends when its work is done
    timing.end = now();
    timings.push_back(timing);
  }
  execution.wait_for_sends();
  return timings;
}

std::vector<std::vector<ActionTiming>> gather_timings(Communicator& pp, const std::vector<ActionTiming>& mine) {
  // Each rank fills its row of a zeroed [p, longest, 6] host table (present, kind, micro-batch,
  // chunk, start, end); a sum over ranks assembles it.
  Tensor count = host_alloc({1}, DType::F64);
  count.data<double>()[0] = static_cast<double>(mine.size());
  pp.all_reduce(count, count, ReduceOp::Max);
  const int64_t longest = static_cast<int64_t>(count.data<double>()[0]), p = pp.size();
  Tensor table = host_alloc({p, std::max<int64_t>(longest, 1), 6}, DType::F64);
  double* row = table.data<double>() + static_cast<int64_t>(pp.rank()) * std::max<int64_t>(longest, 1) * 6;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const ActionTiming& t = mine[i];
    double* r = row + i * 6;
    r[0] = 1;  // present
    r[1] = static_cast<double>(t.action.kind);
    r[2] = t.action.microbatch;
    r[3] = t.action.chunk;
    r[4] = t.start;
    r[5] = t.end;
  }
  pp.all_reduce(table, table, ReduceOp::Sum);
  std::vector<std::vector<ActionTiming>> out(static_cast<std::size_t>(p));
  for (int64_t q = 0; q < p; ++q)
    for (int64_t i = 0; i < longest; ++i) {
      const double* r = table.data<double>() + (q * longest + i) * 6;
      if (r[0] == 0) continue;
      PipelineAction a{static_cast<ActionKind>(static_cast<int>(r[1])), static_cast<int>(r[2]), static_cast<int>(r[3]), -1};
      out[static_cast<std::size_t>(q)].push_back({a, r[4], r[5]});
    }
  return out;
}

double measured_bubble_fraction(const std::vector<std::vector<ActionTiming>>& ranks) {
  double first = 1e300, last = -1e300, busy = 0;
  for (const auto& rank : ranks)
    for (const ActionTiming& t : rank) {
      first = std::min(first, t.start);
      last = std::max(last, t.end);
      if (t.action.kind == ActionKind::Forward || t.action.kind == ActionKind::Backward) busy += t.end - t.start;
    }
  if (ranks.empty() || last <= first) return 0;
  return 1.0 - busy / (static_cast<double>(ranks.size()) * (last - first));
}

nlohmann::json timeline_json(const PipelineSchedule& s, const std::vector<std::vector<ActionTiming>>& ranks) {
  nlohmann::json j;
  j["schedule"] = schedule_kind_name(s.kind);
  j["stages"] = s.stages;
  j["microbatches"] = s.microbatches;
  j["virtual_stages"] = s.virtual_stages;
  j["theoretical_bubble"] = theoretical_bubble_fraction(s);
  j["measured_bubble"] = measured_bubble_fraction(ranks);
  j["ranks"] = nlohmann::json::array();
  for (const auto& rank : ranks) {
    nlohmann::json list = nlohmann::json::array();
    for (const ActionTiming& t : rank)
      list.push_back({{"action", action_code(t.action.kind)}, {"microbatch", t.action.microbatch},
                      {"chunk", t.action.chunk}, {"start", t.start}, {"end", t.end}});
    j["ranks"].push_back(list);
  }
  return j;
}

nlohmann::json simulated_timeline_json(const PipelineSchedule& s, const ScheduleStats& stats) {
  std::vector<std::vector<ActionTiming>> ranks(s.ranks.size());
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    for (std::size_t i = 0; i < s.ranks[r].size(); ++i)
      ranks[r].push_back({s.ranks[r][i], stats.action_times[r][i].first, stats.action_times[r][i].second});
  nlohmann::json timeline = timeline_json(s, ranks);
  timeline["time_unit"] = "stage forwards";  // simulated, not measured: read by reports/plot_pipeline.py
  return timeline;
}

}  // namespace tripod
