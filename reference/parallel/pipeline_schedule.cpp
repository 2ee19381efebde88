#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"

namespace tripod {

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "afab" || name == "gpipe") return ScheduleKind::AllForwardAllBackward;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "interleaved") return ScheduleKind::Interleaved;
  fail("unknown pipeline schedule '", name, "' (expected afab, 1f1b or interleaved)");
}

std::string schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::AllForwardAllBackward: return "afab";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
  }
  return "?";
}

namespace {

struct Compute {
  bool forward;
  int microbatch, chunk;
};

// The compute order of one rank; chunks are global virtual stages.
std::vector<Compute> compute_order(ScheduleKind kind, int p, int m, int v, int rank) {
  std::vector<Compute> order;
  if (kind == ScheduleKind::AllForwardAllBackward) {
    for (int i = 0; i < m; ++i) order.push_back({true, i, rank});
    for (int i = 0; i < m; ++i) order.push_back({false, i, rank});
    return order;
  }
  // 1F1B and interleaved 1F1B (Megatron's order): the k-th forward runs micro-batch mb(k) on local
  // chunk (k / p) % v; backwards walk the local chunks in reverse.
  const int total = m * v;
  auto forward = [&](int k) {
    return Compute{true, (k / (p * v)) * p + k % p, ((k / p) % v) * p + rank};
  };
  auto backward = [&](int k) {
    return Compute{false, (k / (p * v)) * p + k % p, (v - 1 - (k / p) % v) * p + rank};
  };
  const int warmup = v == 1 ? std::min(p - rank - 1, m) : std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(forward(warmup + k));
    order.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(backward(k));
  return order;
}

}  // namespace

PipelineSchedule make_schedule(ScheduleKind kind, int p, int m, int v) {
  check(p >= 1 && m >= 1 && v >= 1, "pipeline schedule needs stages, micro-batches and virtual stages >= 1 (got ",
        p, ", ", m, ", ", v, ")");
  // Bounds far above any real pipeline that keep the schedule's memory and the simulator's time in
  // check (a billion micro-batches once ran out of memory without a word).
  check(p <= kMaxPipelineStages && v <= kMaxPipelineStages && static_cast<int64_t>(p) * m * v <= kMaxChunkPasses,
        "pipeline schedule of ", p, " stages x ", m, " micro-batches x ", v, " virtual stages is too large (at most ",
        kMaxPipelineStages, " stages or virtual stages and ", kMaxChunkPasses, " chunk passes in all)");
  check(v == 1 || kind == ScheduleKind::Interleaved, "virtual stages (", v, ") need the interleaved schedule");
  check(kind != ScheduleKind::Interleaved || m % p == 0, "the interleaved schedule needs the micro-batch count (", m,
        ") to be a multiple of the pipeline stages (", p, ")");
  PipelineSchedule s{kind, p, m, v, std::vector<std::vector<PipelineAction>>(static_cast<std::size_t>(p))};
  const int chunks = p * v;
  for (int r = 0; r < p; ++r) {
    auto& actions = s.ranks[static_cast<std::size_t>(r)];
    for (const Compute& c : compute_order(kind, p, m, v, r)) {
      // Neighbouring chunks on another rank are joined by messages; on the same rank (p = 1) the
      // activation is simply handed over.
      const int prev = c.chunk - 1, next = c.chunk + 1;
      if (c.forward) {
        if (prev >= 0 && prev % p != r) actions.push_back({ActionKind::RecvActivation, c.microbatch, c.chunk, prev % p});
        actions.push_back({ActionKind::Forward, c.microbatch, c.chunk, -1});
        if (next < chunks && next % p != r) actions.push_back({ActionKind::SendActivation, c.microbatch, c.chunk, next % p});
      } else {
        if (next < chunks && next % p != r) actions.push_back({ActionKind::RecvGradient, c.microbatch, c.chunk, next % p});
        actions.push_back({ActionKind::Backward, c.microbatch, c.chunk, -1});
        if (prev >= 0 && prev % p != r) actions.push_back({ActionKind::SendGradient, c.microbatch, c.chunk, prev % p});
      }
    }
  }
  return s;
}

std::string describe(const PipelineAction& a) {
  std::ostringstream out;
  const std::string id = std::to_string(a.microbatch) + ".c" + std::to_string(a.chunk);
  switch (a.kind) {
    case ActionKind::Forward: out << "F" << id; break;
    case ActionKind::Backward: out << "B" << id; break;
    case ActionKind::SendActivation: out << "send-act " << id << " -> " << a.peer; break;
    case ActionKind::RecvActivation: out << "recv-act " << id << " <- " << a.peer; break;
    case ActionKind::SendGradient: out << "send-grad " << id << " -> " << a.peer; break;
    case ActionKind::RecvGradient: out << "recv-grad " << id << " <- " << a.peer; break;
  }
  return out.str();
}

std::string describe(const PipelineSchedule& s) {
  std::ostringstream out;
  out << schedule_kind_name(s.kind) << " p=" << s.stages << " m=" << s.microbatches << " v=" << s.virtual_stages << "\n";
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    out << "  rank " << r << ":";
    for (const auto& a : s.ranks[r])
      if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward) out << " " << describe(a);
    out << "\n";
  }
  return out.str();
}

double theoretical_bubble_fraction(const PipelineSchedule& s) {
  const double p = s.stages, m = s.microbatches, v = s.virtual_stages;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace tripod
