// Pipeline schedules checked on their action lists alone, for p in 1..4, m in 1..8, v in {1, 2}:
// every micro-batch has exactly one forward and one backward per chunk, dependencies hold, every
// receive is matched, nothing deadlocks (validate_schedule simulates it), the in-flight bound is
// the schedule's promise, and the simulated bubble is the theory's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_schedule.h"
#include "support/error_text.h"

namespace tripod {
namespace {

TEST(PipelineSchedule, AllFourPromisesHoldForEverySmallShape) {
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m)
      for (int v : {1, 2})
        for (ScheduleKind kind : {ScheduleKind::AllForwardAllBackward, ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
          if (v > 1 && kind != ScheduleKind::Interleaved) continue;
          if (kind == ScheduleKind::Interleaved && m % p != 0) continue;
          const PipelineSchedule s = make_schedule(kind, p, m, v);
          const std::string what = describe(s);
          ScheduleStats stats;
          ASSERT_NO_THROW(stats = validate_schedule(s)) << what;
          for (int r = 0; r < p; ++r) {
            int bound = m * v;  // AFAB: everything in flight
            if (kind == ScheduleKind::OneFOneB) bound = std::min(p - r, m);
            if (kind == ScheduleKind::Interleaved)
              bound = std::min(v == 1 ? p - r : (p - r - 1) * 2 + (v - 1) * p + 1, m * v);
            EXPECT_EQ(stats.max_in_flight[r], bound) << what << " rank " << r;
            // The simulated timeline: every action timed, in order, computes as long as they cost,
            // sends instant, receives as long as they wait.
            const auto& times = stats.action_times[static_cast<std::size_t>(r)];
            ASSERT_EQ(times.size(), s.ranks[static_cast<std::size_t>(r)].size()) << what;
            for (std::size_t i = 0; i < times.size(); ++i) {
              const ActionKind k = s.ranks[static_cast<std::size_t>(r)][i].kind;
              const double cost = k == ActionKind::Forward ? 1.0 / v : k == ActionKind::Backward ? 2.0 / v : 0.0;
              const bool receive = k == ActionKind::RecvActivation || k == ActionKind::RecvGradient;
              if (receive) EXPECT_GE(times[i].second, times[i].first) << what;
              else EXPECT_NEAR(times[i].second - times[i].first, cost, 1e-12) << what;
              if (i > 0) EXPECT_LE(times[i - 1].second, times[i].first + 1e-12) << what;
            }
          }
          if (kind != ScheduleKind::Interleaved || v == 1)
            EXPECT_NEAR(stats.bubble_fraction, theoretical_bubble_fraction(s), 1e-9) << what;
          else  // interleaving: within 20% of (p-1)/(v*m+p-1)
            EXPECT_NEAR(stats.bubble_fraction, theoretical_bubble_fraction(s), 0.2 * theoretical_bubble_fraction(s) + 1e-9)
                << what;
        }
}

TEST(PipelineSchedule, OneFOneBHoldsFewerMicroBatchesThanAfab) {
  const ScheduleStats afab = validate_schedule(make_schedule(ScheduleKind::AllForwardAllBackward, 4, 8));
  const ScheduleStats one = validate_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 8));
  EXPECT_EQ(afab.max_in_flight[0], 8);
  EXPECT_EQ(one.max_in_flight[0], 4);
  EXPECT_EQ(afab.makespan, one.makespan);  // same bubble, less memory
}

TEST(PipelineSchedule, ImpossibleSettingsAreRefused) {
  EXPECT_THROW(make_schedule(ScheduleKind::Interleaved, 4, 6, 2), Error);  // m not a multiple of p
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 2, 4, 2), Error);     // v > 1 needs interleaving
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 0, 4), Error);
  EXPECT_THROW(parse_schedule_kind("zero-bubble"), Error);
  // A billion micro-batches ran the schedule command out of memory without a word.
  EXPECT_NE(error_of([] { make_schedule(ScheduleKind::OneFOneB, 4, 1000000000); })
                .find("pipeline schedule of 4 stages x 1000000000 micro-batches x 1 virtual stages is too large"),
            std::string::npos);
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, kMaxPipelineStages + 1, 1), Error);
  EXPECT_NO_THROW(make_schedule(ScheduleKind::AllForwardAllBackward, 1, static_cast<int>(kMaxChunkPasses)));
}

TEST(PipelineSchedule, TheExecutorRefusesWhatItCannotRun) {
  for (ScheduleKind kind : {ScheduleKind::AllForwardAllBackward, ScheduleKind::OneFOneB})
    EXPECT_NO_THROW(check_executable(make_schedule(kind, 4, 8)));
  EXPECT_NO_THROW(check_executable(make_schedule(ScheduleKind::Interleaved, 4, 8, 2)));
  // 4096 micro-batches x 8 stages x 2 directions need 65536 distinct tags; MPI guarantees 32768
  EXPECT_THROW(check_executable(make_schedule(ScheduleKind::OneFOneB, 8, 4096)), Error);
  EXPECT_NO_THROW(check_executable(make_schedule(ScheduleKind::OneFOneB, 8, 2048)));
  // a send moved away from the compute that produced its tensor would send a reused buffer
  PipelineSchedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  auto& rank0 = s.ranks[0];
  ASSERT_EQ(rank0[1].kind, ActionKind::SendActivation);
  std::swap(rank0[1], rank0[2]);  // F0 F1 send(0) ...
  EXPECT_THROW(check_executable(s), Error);
}

TEST(PipelineSchedule, ADeadlockIsFound) {
  PipelineSchedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  std::reverse(s.ranks[1].begin(), s.ranks[1].end());  // the last stage now waits for what it must send
  EXPECT_THROW(validate_schedule(s), Error);
}

std::string validation_error(const PipelineSchedule& s) {
  return error_of([&] { validate_schedule(s); });
}

bool names(const PipelineSchedule& s, const std::string& text) {
  return validation_error(s).find(text) != std::string::npos;
}

// The simulator's "every message matched" and "in-flight bound", which it stated and did not check:
// messages were known without their sender, a receive left its message for another, a message
// nobody received went unnoticed and 1F1B's bound was only measured.
TEST(PipelineSchedule, MessagesAndTheInFlightBoundAreChecked) {
  const auto first = [](std::vector<PipelineAction>& actions, ActionKind kind) {
    return std::find_if(actions.begin(), actions.end(), [kind](const PipelineAction& a) { return a.kind == kind; });
  };
  PipelineSchedule unreceived = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  PipelineAction extra = *first(unreceived.ranks[0], ActionKind::SendActivation);
  extra.microbatch = 7;
  unreceived.ranks[0].push_back(extra);
  EXPECT_TRUE(names(unreceived, "1 message(s) sent and never received, the first rank 0's activation of micro-batch "
                                "7 chunk 0 to rank 1")) << validation_error(unreceived);

  PipelineSchedule wrong_peer = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  first(wrong_peer.ranks[1], ActionKind::RecvActivation)->peer = 1;
  EXPECT_TRUE(names(wrong_peer, "waits on rank 1, but chunk 0 lives on rank 0")) << validation_error(wrong_peer);

  PipelineSchedule wrong_destination = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  first(wrong_destination.ranks[0], ActionKind::SendActivation)->peer = 0;
  EXPECT_TRUE(names(wrong_destination, "goes to rank 0, but chunk 1 lives on rank 1"))
      << validation_error(wrong_destination);

  PipelineSchedule twice = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  const auto receive = first(twice.ranks[1], ActionKind::RecvActivation);
  twice.ranks[1].insert(receive + 1, *receive);  // the second waits for a message already taken
  EXPECT_TRUE(names(twice, "deadlocks")) << validation_error(twice);

  PipelineSchedule afab_as_1f1b = make_schedule(ScheduleKind::AllForwardAllBackward, 2, 4);
  afab_as_1f1b.kind = ScheduleKind::OneFOneB;
  EXPECT_TRUE(names(afab_as_1f1b, "rank 0 holds 4 micro-batches in flight, more than 1F1B's 2"))
      << validation_error(afab_as_1f1b);
}

}  // namespace
}  // namespace tripod
