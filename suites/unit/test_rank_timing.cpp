// The straggler report's arithmetic: busy = step - wait per rank, the slowest rank is the one that
// worked longest (not the one whose step was longest: in synchronous training all steps are alike),
// the median and ratio over ranks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/rank_timing.h"

namespace tripod {
namespace {

TEST(RankTiming, TheRankThatWaitsLeastIsTheStraggler) {
  // Four ranks, equal step times; rank 2 waits least, so it worked longest.
  const RankTimes t = summarize_rank_times(40, 10, {0.100, 0.100, 0.101, 0.100}, {0.030, 0.032, 0.001, 0.028});
  EXPECT_EQ(t.slowest_rank, 2);
  EXPECT_DOUBLE_EQ(t.slowest_busy_seconds, 0.100);
  ASSERT_EQ(t.busy_seconds.size(), 4u);
  EXPECT_DOUBLE_EQ(t.busy_seconds[1], 0.100 - 0.032);
  EXPECT_DOUBLE_EQ(t.median_busy_seconds, 0.5 * ((0.100 - 0.030) + (0.100 - 0.028)));
  EXPECT_NEAR(t.straggler_ratio, 0.100 / t.median_busy_seconds, 1e-12);
  const nlohmann::json j = rank_times_json(t);
  EXPECT_EQ(j["event"], "ranks");
  EXPECT_EQ(j["slowest_rank"], 2);
  EXPECT_EQ(j["steps"], 10);
  EXPECT_NE(describe_rank_times(t).find("slowest 2"), std::string::npos) << describe_rank_times(t);
}

TEST(RankTiming, OddCountsTiesAndBadInput) {
  const RankTimes t = summarize_rank_times(1, 1, {1, 1, 1}, {0.5, 0.5, 0.5});
  EXPECT_EQ(t.slowest_rank, 0);  // ties name the lowest rank
  EXPECT_DOUBLE_EQ(t.median_busy_seconds, 0.5);
  EXPECT_DOUBLE_EQ(t.straggler_ratio, 1.0);
  // A wait longer than the step (clock granularity) counts as no work, not negative work.
  EXPECT_DOUBLE_EQ(summarize_rank_times(1, 1, {0.1}, {0.2}).busy_seconds[0], 0.0);
  EXPECT_THROW(summarize_rank_times(1, 1, {0.1, 0.2}, {0.1}), Error);
}

}  // namespace
}  // namespace tripod
