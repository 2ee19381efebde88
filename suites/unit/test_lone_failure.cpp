// conform/lone_failure.h: how long a rank that left a row on an error waits for the others, and
// the bounded wait itself.
#include <gtest/gtest.h>

#include <chrono>

#include "conform/lone_failure.h"

namespace tripod::conform {
namespace {

TEST(LoneFailureGrace, TenSecondsOrThreeTimesTheRowWithinTheTimeout) {
  EXPECT_EQ(lone_failure_grace(0.5, 300), 10);   // a short row: the floor
  EXPECT_EQ(lone_failure_grace(20, 300), 60);    // a long one: three times as long as it ran here
  EXPECT_EQ(lone_failure_grace(1, 12), 10);      // 1 + 10 s is still inside the row's 12 s timeout
  EXPECT_EQ(lone_failure_grace(3, 12), -1);      // 3 + 10 s would reach it: the watchdog reports instead
  EXPECT_EQ(lone_failure_grace(50, 150), -1);    // 50 + 150 s likewise
}

class NeverCompletes final : public CommRequest {
 public:
  void wait() override { FAIL() << "the bounded wait must not block"; }
  bool test() override {
    ++tests;
    return false;
  }
  int tests = 0;
};

class CompletesOnThirdTest final : public CommRequest {
 public:
  void wait() override { FAIL() << "the bounded wait must not block"; }
  bool test() override { return ++tests >= 3; }
  int tests = 0;
};

TEST(LoneFailureGrace, TheWaitEndsWhenTheRequestCompletesOrTheTimeIsUp) {
  CompletesOnThirdTest arriving;
  EXPECT_TRUE(completes_within(arriving, 10));
  EXPECT_EQ(arriving.tests, 3);

  NeverCompletes stuck;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(completes_within(stuck, 0.05));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.05);
  EXPECT_LT(waited, 2.0);
  EXPECT_GT(stuck.tests, 1);  // it kept making progress while it waited
}

}  // namespace
}  // namespace tripod::conform
