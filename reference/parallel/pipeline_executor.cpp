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
// chunk), and the sends still in flight, each owning a copy of its tensor until it completes.
class RankExecution {
 public:
  RankExecution(const PipelineSchedule& schedule, Communicator& pp, Backend& backend, const PipelineWork& work)
      : schedule_(schedule), pp_(pp), backend_(backend), work_(work),
        chunks_(schedule.stages * schedule.virtual_stages) {}

  void perform(const PipelineAction& a) {
    switch (a.kind) {
      case ActionKind::Forward: forward(a); break;
      case ActionKind::Backward: backward(a); break;
      case ActionKind::SendActivation:
      case ActionKind::SendGradient: send(a); break;
      case ActionKind::RecvActivation:
      case ActionKind::RecvGradient: receive(a); break;
    }
  }

  // Sends complete while this rank computes only if MPI gets a chance to progress them; the
  // finished ones free their copies (1F1B's memory bound holds for the messages too).
  void release_completed_sends() {
    sends_.erase(std::remove_if(sends_.begin(), sends_.end(), [](Sending& s) { return s.request->test(); }),
                 sends_.end());
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

  void forward(const PipelineAction& a) {
    // Chunk 0 reads tokens; every other chunk's input arrived from the previous rank.
    if (a.chunk == 0) {
      work_.forward(a.microbatch, a.chunk, nullptr);
    } else {
      const Tensor input = take(activations_, a.microbatch, a.chunk);
      work_.forward(a.microbatch, a.chunk, &input);
    }
  }

  void backward(const PipelineAction& a) {
    if (a.chunk == chunks_ - 1) {
      work_.backward(a.microbatch, a.chunk, nullptr);
    } else {
      const Tensor grad = take(gradients_, a.microbatch, a.chunk);
      work_.backward(a.microbatch, a.chunk, &grad);
    }
  }

  void send(const PipelineAction& a) {
    const bool gradient = a.kind == ActionKind::SendGradient;
    Sending s{work_.boundary_buffer(), nullptr};
    backend_.copy(gradient ? work_.input_grad(a.microbatch, a.chunk) : work_.output(a.microbatch, a.chunk), s.copy);
    s.request = pp_.send_async(s.copy, a.peer, message_tag(schedule_, a.microbatch, a.chunk, gradient));
    sends_.push_back(std::move(s));
  }

  void receive(const PipelineAction& a) {
    const bool gradient = a.kind == ActionKind::RecvGradient;
    Tensor buffer = work_.boundary_buffer();
    pp_.recv(buffer, a.peer, message_tag(schedule_, a.microbatch, gradient ? a.chunk + 1 : a.chunk - 1, gradient));
    (gradient ? gradients_ : activations_)[{a.microbatch, a.chunk}] = buffer;
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
  Communicator& pp_;
  Backend& backend_;
  const PipelineWork& work_;
  const int chunks_;
  Received activations_, gradients_;
  std::vector<Sending> sends_;
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
      check(i > 0 && actions[i - 1].kind == producer && actions[i - 1].microbatch == actions[i].microbatch &&
                actions[i - 1].chunk == actions[i].chunk,
            "pipeline schedule: rank ", r, "'s ", describe(actions[i]), " does not directly follow the compute that ",
            "produces its tensor");
    }
  }
}

std::vector<ActionTiming> run_pipeline(const PipelineSchedule& schedule, Communicator& pp, Backend& backend,
                                       const PipelineWork& work, bool forward_only) {
  // Neighbouring chunks on one rank (p = 1 with v > 1) would hand over without messages: not supported.
  check(schedule.stages > 1 || schedule.virtual_stages == 1, "pipeline: virtual stages need more than one stage");
  check(pp.size() == schedule.stages, "pipeline schedule for ", schedule.stages, " stages run on ", pp.name(),
        " of ", pp.size(), " ranks");
  check_executable(schedule);
  const auto& actions = schedule.ranks[static_cast<std::size_t>(pp.rank())];
  RankExecution execution(schedule, pp, backend, work);

  std::vector<ActionTiming> timings;
  pp.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (const PipelineAction& a : actions) {
    if (forward_only && is_gradient_action(a.kind)) continue;
    ActionTiming timing{a, now(), 0};
    execution.perform(a);
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
