// The peak MFU is taken against, with shared hardware counted once (train/world_peak.h): two staged
// ranks on one GPU were held against two GPUs, and four one-thread ranks on two CPUs against four cores.
#include <gtest/gtest.h>

#include "train/world_peak.h"

namespace tripod {
namespace {

TEST(WorldPeak, RanksOnOneDeviceCountItOnce) {
  EXPECT_EQ(distinct_devices({"node0|0000:3B:00.0", "node0|0000:3B:00.0"}), 1);
  EXPECT_EQ(distinct_devices({"node0|0000:3B:00.0", "node0|0000:5C:00.0", "node1|0000:3B:00.0"}), 3);
}

TEST(WorldPeak, RanksSharingCpusCountTheirShare) {
  // 4 one-thread ranks on 2 CPUs: half a core's peak each.
  EXPECT_DOUBLE_EQ(shared_cpu_peak(100.0, 1, 2, 4), 50.0);
  // 2 ranks of 1 thread on 2 CPUs, or bound one CPU each: their own peaks.
  EXPECT_DOUBLE_EQ(shared_cpu_peak(100.0, 1, 2, 2), 100.0);
  EXPECT_DOUBLE_EQ(shared_cpu_peak(100.0, 1, 4, 4), 100.0);
  // 2 ranks of 2 threads on 2 CPUs (--bind-to none, OMP_NUM_THREADS=2): one CPU each.
  EXPECT_DOUBLE_EQ(shared_cpu_peak(200.0, 2, 2, 2), 100.0);
}

}  // namespace
}  // namespace tripod
