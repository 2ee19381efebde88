// Pipeline messages without tags: NCCL pairs the i-th send from rank A to rank B with the i-th
// receive at B from A, runs the operations of one communicator in issue order, and an operation
// waits for its peer's (no eager buffering can be assumed). The NCCL communicator
// (comm/nccl/nccl_communicator.h) therefore gives each sender of a group its own communicator and
// stream: a rank's sends run in issue order on its own, its receives from rank q in order on q's,
// and no send can hold up a receive. The pipeline executor issues each schedule action in order,
// sends without waiting, receives waiting until they complete. This suite checks, for every
// schedule shape, that under exactly those rules
//   - order matches tags: per ordered pair, the sends' messages come in the order the receives
//     expect them (what the MPI communicator's tags would have matched);
//   - nothing deadlocks.
// It also shows why one communicator (sends and receives in one queue, paired at each receive)
// is not enough: the interleaved schedules deadlock there; and why the sender communicators are
// connected when they are made: NCCL connects a pair lazily, at its first call on a communicator,
// and that call waits on the host for the peer's first call there, so receives posted ahead
// (--receives-ahead) on different sender communicators would wait for each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace tripod {
namespace {

struct Message {
  bool gradient = false;
  int microbatch = 0;
  int sender_chunk = 0;
  bool operator==(const Message& o) const {
    return gradient == o.gradient && microbatch == o.microbatch && sender_chunk == o.sender_chunk;
  }
};

struct Op {
  bool send = false;
  int peer = 0;
  Message message;
  int group = 0;  // one-queue model: index of the NCCL group (queued sends + the next receive)
  bool issued = false, done = false;
};

// Every rank's point-to-point operations in issue order.
std::vector<std::vector<Op>> p2p_ops(const PipelineSchedule& s) {
  std::vector<std::vector<Op>> ranks(s.ranks.size());
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    int group = 0;
    for (const PipelineAction& a : s.ranks[r]) {
      const bool gradient = a.kind == ActionKind::SendGradient || a.kind == ActionKind::RecvGradient;
      if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGradient) {
        ranks[r].push_back({true, a.peer, {gradient, a.microbatch, a.chunk}, group});
      } else if (a.kind == ActionKind::RecvActivation || a.kind == ActionKind::RecvGradient) {
        const int sender_chunk = gradient ? a.chunk + 1 : a.chunk - 1;
        ranks[r].push_back({false, a.peer, {gradient, a.microbatch, sender_chunk}, group});
        ++group;
      }
    }
  }
  return ranks;
}

std::string text(const Message& m) {
  return std::string(m.gradient ? "grad" : "act") + " mb" + std::to_string(m.microbatch) + ".c" +
         std::to_string(m.sender_chunk);
}

enum class Queues { PerSender, One };
// When a pair of ranks is connected on a communicator: all up front (NcclCommunicator's
// connect_senders), or by NCCL at the pair's first call there, which blocks the caller's host until
// the peer makes its own first call on that communicator.
enum class Connect { UpFront, Lazily };

// Checks FIFO matching and simulates the queues, with the executor posting the next
// `receives_ahead` receives before each action; returns "" or what went wrong.
std::string check_schedule(const PipelineSchedule& s, Queues queues = Queues::PerSender, int receives_ahead = 0,
                           Connect connect = Connect::UpFront) {
  auto ranks = p2p_ops(s);
  const int p = static_cast<int>(ranks.size());
  // partner[r][i]: (rank, index) of the operation that op i of rank r meets, by order per pair.
  std::map<std::tuple<int, int, bool>, std::vector<int>> by_pair;  // (rank, peer, send) -> op indices
  for (int r = 0; r < p; ++r)
    for (int i = 0; i < static_cast<int>(ranks[r].size()); ++i)
      by_pair[{r, ranks[r][i].peer, ranks[r][i].send}].push_back(i);
  std::vector<std::vector<std::pair<int, int>>> partner(p);
  for (int r = 0; r < p; ++r) {
    partner[r].resize(ranks[r].size());
    for (int i = 0; i < static_cast<int>(ranks[r].size()); ++i) {
      const Op& op = ranks[r][i];
      const auto& mine = by_pair[{r, op.peer, op.send}];
      const auto& theirs = by_pair[{op.peer, r, !op.send}];
      const std::size_t k = static_cast<std::size_t>(std::find(mine.begin(), mine.end(), i) - mine.begin());
      if (mine.size() != theirs.size())
        return "rank " + std::to_string(r) + " and rank " + std::to_string(op.peer) + " post " +
               std::to_string(mine.size()) + " and " + std::to_string(theirs.size()) + " matching operations";
      const Op& other = ranks[op.peer][theirs[k]];
      if (!(other.message == op.message))
        return "rank " + std::to_string(r) + "'s " + (op.send ? "send " : "receive ") + text(op.message) +
               " would meet rank " + std::to_string(op.peer) + "'s " + text(other.message);
      partner[r][i] = {op.peer, theirs[k]};
    }
  }
  // The queue an operation waits in: per sender (the sender's own sends; a receiver's receives
  // from that sender), or the rank's one queue.
  auto queue_of = [&](int r, const Op& op) { return queues == Queues::One ? -1 : op.send ? r : op.peer; };
  // Runs when issued and everything before it in its queue has finished (one queue: when its
  // group is the oldest unfinished one, all of a group running together).
  auto ready = [&](int r, int i) {
    const Op& op = ranks[r][i];
    if (!op.issued || op.done) return false;
    for (int j = 0; j < i; ++j) {
      const Op& before = ranks[r][j];
      if (before.done) continue;
      if (queues == Queues::One ? before.group < op.group : queue_of(r, before) == queue_of(r, op)) return false;
    }
    return true;
  };
  std::vector<std::size_t> host(p, 0);  // the next operation each rank's host issues
  using Pair = std::tuple<int, int, int>;  // (queue, lower rank, higher rank)
  std::set<Pair> connected;
  std::map<Pair, std::set<int>> arrived;  // ranks whose host waits in the pair's first call
  bool progress = true;
  // Issues op i of rank r; false while its host waits for a lazy connection.
  auto issue = [&](int r, Op& op) {
    if (op.issued) return true;
    if (connect == Connect::Lazily) {
      const Pair pair{queue_of(r, op), std::min(r, op.peer), std::max(r, op.peer)};
      if (!connected.count(pair)) {
        arrived[pair].insert(r);
        if (arrived[pair].size() < 2) return false;
        connected.insert(pair);
      }
    }
    op.issued = true;
    progress = true;
    return true;
  };
  // The executor posts the next `receives_ahead` receives (from the host's position on) first.
  auto post_ahead = [&](int r) {
    int posted = 0;
    for (std::size_t i = host[r]; i < ranks[r].size() && posted < receives_ahead; ++i) {
      Op& op = ranks[r][i];
      if (op.send) continue;
      if (!issue(r, op)) return false;
      ++posted;
    }
    return true;
  };
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r)  // sends are issued without waiting; a receive blocks until done
      while (host[r] < ranks[r].size()) {
        if (!post_ahead(r)) break;
        Op& op = ranks[r][host[r]];
        if (!issue(r, op)) break;
        if (!op.send && !op.done) break;
        ++host[r];
      }
    if (queues == Queues::One)  // a receive issues the queued sends with it, as one group
      for (int r = 0; r < p; ++r)
        for (Op& op : ranks[r])
          if (host[r] < ranks[r].size() && op.group == ranks[r][host[r]].group) op.issued = true;
    for (int r = 0; r < p; ++r)
      for (int i = 0; i < static_cast<int>(ranks[r].size()); ++i) {
        const auto [q, j] = partner[r][i];
        if (!ready(r, i) || !ready(q, j)) continue;
        ranks[r][i].done = ranks[q][j].done = true;
        progress = true;
      }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r)
    for (int i = 0; i < static_cast<int>(ranks[r].size()); ++i)
      if (!ranks[r][i].done) {
        const Op& op = ranks[r][i];
        stuck += std::string(stuck.empty() ? "" : "; ") + "rank " + std::to_string(r) + " deadlocks at its " + (op.send ? "send " : "receive ") + text(op.message);
        break;
      }
  return stuck;
}

TEST(PipelineMessageOrder, EveryScheduleMatchesByOrderAndCannotDeadlockWithAQueuePerSender) {
  int checked = 0;
  for (int p = 2; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m)
      for (int v : {1, 2, 3})
        for (ScheduleKind kind : {ScheduleKind::AllForwardAllBackward, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
          if (v > 1 && kind != ScheduleKind::Interleaved) continue;
          if (kind == ScheduleKind::Interleaved && m % p != 0) continue;
          const PipelineSchedule s = make_schedule(kind, p, m, v);
          EXPECT_EQ(check_schedule(s), "") << describe(s);
          ++checked;
        }
  EXPECT_GT(checked, 50);
}

TEST(PipelineMessageOrder, ReceivesPostedAheadChangeNothingOnceThePairsAreConnected) {
  for (int ahead : {1, 2, 64})
    for (int p = 2; p <= 4; ++p)
      for (int m : {1, 4, 8})
        for (int v : {1, 2})
          for (ScheduleKind kind : {ScheduleKind::AllForwardAllBackward, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
            if (v > 1 && kind != ScheduleKind::Interleaved) continue;
            if (kind == ScheduleKind::Interleaved && m % p != 0) continue;
            const PipelineSchedule s = make_schedule(kind, p, m, v);
            EXPECT_EQ(check_schedule(s, Queues::PerSender, ahead), "") << describe(s) << ", " << ahead << " ahead";
          }
}

// Why NcclCommunicator::connect_senders connects every pair up front: with NCCL's lazy connection,
// stage 0's first call is the gradient receive posted ahead on rank 1's communicator and stage 1's
// the activation receive on rank 0's; each waits on the host for the other. Without receives
// ahead the first calls meet (a send and its receive), so the executor's default exposed it.
TEST(PipelineMessageOrder, LazyConnectionsDeadlockReceivesPostedAhead) {
  const PipelineSchedule s = make_schedule(ScheduleKind::OneFOneB, 2, 4);
  EXPECT_EQ(check_schedule(s, Queues::PerSender, 0, Connect::Lazily), "");
  const std::string lazy = check_schedule(s, Queues::PerSender, 2, Connect::Lazily);
  EXPECT_NE(lazy.find("deadlocks"), std::string::npos) << lazy;
  EXPECT_EQ(check_schedule(s, Queues::PerSender, 2, Connect::UpFront), "");
}

// Why the NCCL communicator does not put a rank's sends and receives in one queue, even paired
// into one NCCL group at each receive: a send whose receive comes much later at the peer holds up
// the receives behind it, and the interleaved schedules deadlock.
TEST(PipelineMessageOrder, OneQueuePerRankDeadlocksTheInterleavedSchedule) {
  const PipelineSchedule s = make_schedule(ScheduleKind::Interleaved, 2, 4, 2);
  EXPECT_EQ(check_schedule(s), "");
  EXPECT_NE(check_schedule(s, Queues::One).find("deadlocks"), std::string::npos);
  EXPECT_EQ(check_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 8), Queues::One), "");
}

// The checker can fail: a schedule whose last stage takes its two activations in the opposite
// order mismatches, and one where both neighbours receive before they send deadlocks.
TEST(PipelineMessageOrder, TheCheckerCatchesAReorderedReceiveAndADeadlock) {
  PipelineSchedule s = make_schedule(ScheduleKind::AllForwardAllBackward, 2, 2);
  auto& last = s.ranks[1];
  std::vector<std::size_t> receives;
  for (std::size_t i = 0; i < last.size(); ++i)
    if (last[i].kind == ActionKind::RecvActivation) receives.push_back(i);
  ASSERT_EQ(receives.size(), 2u);
  std::swap(last[receives[0]].microbatch, last[receives[1]].microbatch);
  EXPECT_NE(check_schedule(s).find("would meet"), std::string::npos) << check_schedule(s);

  PipelineSchedule d = make_schedule(ScheduleKind::AllForwardAllBackward, 2, 1);
  // Rank 0 waits for the gradient before it sends the activation the gradient depends on.
  auto& first = d.ranks[0];
  auto send = std::find_if(first.begin(), first.end(), [](const PipelineAction& a) { return a.kind == ActionKind::SendActivation; });
  auto recv = std::find_if(first.begin(), first.end(), [](const PipelineAction& a) { return a.kind == ActionKind::RecvGradient; });
  ASSERT_TRUE(send != first.end() && recv != first.end());
  const PipelineAction moved = *send;
  first.erase(send);
  first.push_back(moved);
  EXPECT_NE(check_schedule(d).find("deadlocks"), std::string::npos) << check_schedule(d);
}

}  // namespace
}  // namespace tripod
