// The pipeline executor without a model: every forward must receive exactly the activation that
// the previous chunk produced for the same micro-batch, every backward the gradient of the next
// chunk - for every schedule, p in {2, 4} (as the world allows), v in {1, 2}, several m and 0, 1, 2
// and 64 receives posted ahead - and the recorded timings must list every action in order with
// start <= end. Message buffers are pooled, so a stale buffer handed to the wrong action would show
// here as another micro-batch's stamp.
#include <gtest/gtest.h>

#include <map>

#include "support/test_backend.h"
#include "comm/mpi_communicator.h"
#include "backend/transfer.h"
#include "parallel/pipeline_executor.h"

namespace tripod {
namespace {

// A boundary tensor that names who made it: value = 1000 * microbatch + 10 * chunk + kind.
double stamp(int mb, int chunk, int kind) { return 1000.0 * mb + 10.0 * chunk + kind; }

TEST(PipelineExecutor, EveryMessageReachesItsMicroBatchAndChunk) {
  auto world = testing::test_world();
  auto backend = testing::make_test_backend();
  for (int p : {2, 4}) {
    if (world->size() % p != 0) continue;
    auto pp = world->split(world->rank() / p, world->rank(), "pp");
    for (ScheduleKind kind : {ScheduleKind::AllForwardAllBackward, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
      for (int m : {1, 3, 4, 8})
      for (int ahead : {0, 1, 2, 64}) {
        const int v = kind == ScheduleKind::Interleaved ? 2 : 1;
        if (kind == ScheduleKind::Interleaved && m % p != 0) continue;
        const PipelineSchedule schedule = make_schedule(kind, p, m, v);
        const int chunks = p * v;
        std::map<std::pair<int, int>, int> forwards, backwards;
        Tensor out = backend->alloc({3, 5}, DType::F64);
        PipelineWork work;
        work.boundary_buffer = [&] { return backend->alloc({3, 5}, DType::F64); };
        work.forward = [&](int mb, int chunk, const Tensor* input) {
          ++forwards[{mb, chunk}];
          EXPECT_EQ(input == nullptr, chunk == 0);
          if (input) {
            EXPECT_EQ(to_host_f64(*backend, *input)[7], stamp(mb, chunk - 1, 1)) << describe(schedule);
          }
          backend->fill(out, stamp(mb, chunk, 1));
        };
        work.backward = [&](int mb, int chunk, const Tensor* grad) {
          ++backwards[{mb, chunk}];
          EXPECT_EQ((forwards[{mb, chunk}]), 1) << "backward before forward";
          EXPECT_EQ(grad == nullptr, chunk == chunks - 1);
          if (grad) {
            EXPECT_EQ(to_host_f64(*backend, *grad)[14], stamp(mb, chunk + 1, 2)) << describe(schedule);
          }
          backend->fill(out, stamp(mb, chunk, 2));
        };
        work.output = [&](int, int) { return out; };
        work.input_grad = [&](int, int) { return out; };
        const std::vector<ActionTiming> timings =
            run_pipeline(schedule, *pp, *backend, work, /*forward_only=*/false, ahead);
        const auto& actions = schedule.ranks[static_cast<std::size_t>(pp->rank())];
        ASSERT_EQ(timings.size(), actions.size());
        for (std::size_t i = 0; i < actions.size(); ++i) {
          EXPECT_EQ(timings[i].action.kind, actions[i].kind);
          EXPECT_LE(timings[i].start, timings[i].end);
          if (i > 0) {
            EXPECT_LE(timings[i - 1].end, timings[i].start);
          }
        }
        for (int c = pp->rank(); c < chunks; c += p)
          for (int mb = 0; mb < m; ++mb) {
            EXPECT_EQ((forwards[{mb, c}]), 1);
            EXPECT_EQ((backwards[{mb, c}]), 1);
          }
        // Every rank sees every rank's timings; the measured bubble is a fraction.
        const auto all = gather_timings(*pp, timings);
        ASSERT_EQ(all.size(), static_cast<std::size_t>(p));
        for (std::size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r].size(), schedule.ranks[r].size());
        const double bubble = measured_bubble_fraction(all);
        EXPECT_GE(bubble, 0.0);
        EXPECT_LT(bubble, 1.0);
        // Forward-only (evaluation) runs just the forwards and activation messages.
        forwards.clear();
        backwards.clear();
        run_pipeline(schedule, *pp, *backend, work, /*forward_only=*/true, ahead);
        EXPECT_TRUE(backwards.empty());
        EXPECT_EQ(forwards.size(), static_cast<std::size_t>(m * v));
      }
  }
}

}  // namespace
}  // namespace tripod
