// core/crash_report.h: a fatal signal prints the stack, then the process still dies of the signal.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <initializer_list>

#include "core/crash_report.h"

namespace tripod {
namespace {

void clear_rank_variables() {  // what a launcher would set (the first line would name the rank)
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"})
    unsetenv(variable);
}

class CrashReport : public ::testing::Test {
 protected:
  // The suite's process may run OpenMP threads by now: the child re-executes the test binary.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CrashReport, ASegmentationFaultPrintsTheStackAndStillKills) {
  EXPECT_EXIT(
      {
        clear_rank_variables();
        install_crash_report("probe");
        std::raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "probe: fatal signal SIGSEGV \\(segmentation fault\\); its stack follows.*\n.*\\[0x[0-9a-f]+\\]");
}

TEST_F(CrashReport, AnAbortToo) {
  EXPECT_EXIT(
      {
        clear_rank_variables();
        install_crash_report("probe");
        std::abort();
      },
      ::testing::KilledBySignal(SIGABRT), "probe: fatal signal SIGABRT \\(abort\\)");
}

TEST_F(CrashReport, UnderALauncherItNamesTheRank) {
  EXPECT_EXIT(
      {
        clear_rank_variables();
        setenv("OMPI_COMM_WORLD_RANK", "3", 1);
        install_crash_report("probe");
        std::raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV), "probe \\(rank 3\\): fatal signal SIGSEGV");
}

TEST_F(CrashReport, WithoutItTheSignalSaysNothing) {  // what the GPU run's log showed
  EXPECT_EXIT(std::raise(SIGSEGV), ::testing::KilledBySignal(SIGSEGV), "^$");
}

}  // namespace
}  // namespace tripod
