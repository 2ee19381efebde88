// The bench suite's ranks and communicator per node (bench/suite_ranks.h). The rule matters on a
// one-GPU node, where NCCL refuses the suite's two ranks: `tripod bench --backend cuda` there
// failed its collective, training and pipeline steps unless the user knew to add --comm staged.
#include <gtest/gtest.h>

#include "bench/suite_ranks.h"

namespace tripod::bench {
namespace {

TEST(BenchSuiteRanks, OnTheCpuARankPerCoreAndTheCommunicatorAsGiven) {
  EXPECT_EQ(plan_suite_ranks(0, "auto", false, 16, -1).ranks, 16);
  EXPECT_EQ(plan_suite_ranks(0, "auto", false, 1, -1).ranks, 2);
  EXPECT_EQ(plan_suite_ranks(4, "auto", false, 16, -1).ranks, 4);
  EXPECT_EQ(plan_suite_ranks(0, "auto", false, 16, -1).comm, "auto");
  EXPECT_TRUE(plan_suite_ranks(0, "auto", false, 16, -1).why.empty());
}

TEST(BenchSuiteRanks, OneGpuSharedByTwoStagedRanks) {
  const SuiteRanks plan = plan_suite_ranks(0, "auto", true, 16, 1);
  EXPECT_EQ(plan.ranks, 2);
  EXPECT_EQ(plan.comm, "staged");
  EXPECT_NE(plan.why.find("NCCL refuses two ranks on one GPU"), std::string::npos) << plan.why;
}

TEST(BenchSuiteRanks, ARankPerGpuOverNcclWhereThereAreEnough) {
  const SuiteRanks plan = plan_suite_ranks(0, "auto", true, 96, 8);
  EXPECT_EQ(plan.ranks, 8);  // not one per core
  EXPECT_EQ(plan.comm, "nccl");
  EXPECT_EQ(plan_suite_ranks(4, "auto", true, 96, 8).comm, "nccl");
  EXPECT_EQ(plan_suite_ranks(16, "auto", true, 96, 8).comm, "staged");
}

TEST(BenchSuiteRanks, WhatTheUserTypedIsKept) {
  EXPECT_EQ(plan_suite_ranks(0, "nccl", true, 16, 1).comm, "nccl");  // e.g. with NCCL_HOSTID per rank
  EXPECT_EQ(plan_suite_ranks(0, "staged", true, 16, 8).comm, "staged");
  EXPECT_EQ(plan_suite_ranks(3, "auto", true, 16, 1).ranks, 3);
  EXPECT_TRUE(plan_suite_ranks(0, "staged", true, 16, 1).why.empty());
}

TEST(BenchSuiteRanks, WithoutNvmlTheChoiceIsLeftToTheStepsAndSaidSo) {
  const SuiteRanks plan = plan_suite_ranks(0, "auto", true, 16, -1);
  EXPECT_EQ(plan.ranks, 2);
  EXPECT_EQ(plan.comm, "auto");
  EXPECT_NE(plan.why.find("unknown"), std::string::npos) << plan.why;
}

TEST(BenchSuiteRanks, CudaVisibleDevicesCutsNvmlsCount) {
  EXPECT_EQ(visible_gpu_count(8, true, nullptr), 8);
  EXPECT_EQ(visible_gpu_count(8, true, "0,1"), 2);
  EXPECT_EQ(visible_gpu_count(8, true, "GPU-4a2f,GPU-77c1,GPU-9e00"), 3);
  EXPECT_EQ(visible_gpu_count(8, true, ""), 0);  // hides every GPU
  EXPECT_EQ(visible_gpu_count(1, true, "0,1,2"), 1);
  EXPECT_EQ(visible_gpu_count(0, false, "0"), -1);
}

}  // namespace
}  // namespace tripod::bench
