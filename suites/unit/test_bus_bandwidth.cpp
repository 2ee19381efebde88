// The nccl-tests arithmetic of commbench (bus_bandwidth.h and each collective's description, looked
// up through collective_spec.h) against nccl-tests' definitions (src/<collective>.cu
// GetCollByteCount and GetBw, doc/PERFORMANCE.md), with sizes and times fixed and the expected
// numbers worked by hand. Pure arithmetic: no MPI.
#include <gtest/gtest.h>

#include "commbench/collective_spec.h"
#include "core/error.h"

namespace tripod::commbench {
namespace {

TEST(BusBandwidth, FactorsArePerformanceMdFormulas) {
  // all_reduce 2(n-1)/n: n=1 -> 0, n=2 -> 1, n=8 -> 14/8.
  EXPECT_DOUBLE_EQ(bus_factor(Collective::AllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::AllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::AllReduce, 8), 1.75);
  // all_gather, reduce_scatter, alltoall (n-1)/n.
  EXPECT_DOUBLE_EQ(bus_factor(Collective::AllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::ReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::AllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::AllToAll, 3), 2.0 / 3.0);
  // broadcast, reduce, sendrecv 1 whatever n.
  for (Collective c : {Collective::Broadcast, Collective::Reduce, Collective::SendRecv}) {
    EXPECT_DOUBLE_EQ(bus_factor(c, 1), 1.0);
    EXPECT_DOUBLE_EQ(bus_factor(c, 8), 1.0);
  }
  EXPECT_THROW(bus_factor(Collective::AllReduce, 0), Error);
}

TEST(BusBandwidth, AllReduceEightRanks128MiBInOneMillisecond) {
  // algbw = 134217728 B / 1e9 / 1e-3 s = 134.217728 GB/s; busbw = x 1.75 = 234.881024 GB/s.
  const Bandwidth b = collective_bandwidth(Collective::AllReduce, 134217728, 1e-3, 8);
  EXPECT_NEAR(b.algbw, 134.217728, 1e-9);
  EXPECT_NEAR(b.busbw, 234.881024, 1e-9);
}

TEST(BusBandwidth, AllGatherUsesTheTotalSize) {
  // 128 MiB of floats on 8 ranks: count 33554432, block 4194304 (a multiple of 4 floats = 16 B);
  // the printed size is the whole gathered buffer, 8 x 4194304 x 4 = 134217728 B.
  const CollectiveCounts c = collective_counts(Collective::AllGather, 134217728, 4, 8);
  EXPECT_EQ(c.send, 4194304);
  EXPECT_EQ(c.recv, 33554432);
  EXPECT_EQ(c.printed, 4194304);
  EXPECT_EQ(c.bytes, 134217728);
  // In 2 ms: algbw 67.108864 GB/s, busbw x 7/8 = 58.720256 GB/s.
  const Bandwidth b = collective_bandwidth(Collective::AllGather, c.bytes, 2e-3, 8);
  EXPECT_NEAR(b.algbw, 67.108864, 1e-9);
  EXPECT_NEAR(b.busbw, 58.720256, 1e-9);
}

TEST(BusBandwidth, ReduceScatterRoundsBlocksToSixteenBytes) {
  // 1 MiB of floats on 3 ranks: 262144 / 3 = 87381 -> 87380 (multiple of 4); send 3 x 87380.
  const CollectiveCounts c = collective_counts(Collective::ReduceScatter, 1048576, 4, 3);
  EXPECT_EQ(c.send, 262140);
  EXPECT_EQ(c.recv, 87380);
  EXPECT_EQ(c.printed, 87380);
  EXPECT_EQ(c.bytes, 1048560);
  // In 100 us: algbw = 1048560 / 1e9 / 1e-4 = 10.4856 GB/s, busbw x 2/3 = 6.9904 GB/s.
  const Bandwidth b = collective_bandwidth(Collective::ReduceScatter, c.bytes, 1e-4, 3);
  EXPECT_NEAR(b.algbw, 10.4856, 1e-9);
  EXPECT_NEAR(b.busbw, 6.9904, 1e-9);
}

TEST(BusBandwidth, AllToAllCountsAndSmallSizes) {
  // 1000 B of doubles on 3 ranks: 125 / 3 = 41 -> 40 (multiple of 2 doubles = 16 B).
  const CollectiveCounts c = collective_counts(Collective::AllToAll, 1000, 8, 3);
  EXPECT_EQ(c.send, 120);
  EXPECT_EQ(c.recv, 120);
  EXPECT_EQ(c.printed, 40);
  EXPECT_EQ(c.bytes, 960);
  // 8 B of floats gathered over 2 ranks: block 1 -> 0 elements, as nccl-tests prints (size 0).
  EXPECT_EQ(collective_counts(Collective::AllGather, 8, 4, 2).bytes, 0);
}

TEST(BusBandwidth, WholeBufferCollectives) {
  // all_reduce, broadcast, reduce, sendrecv: count = bytes / element size, rounded down.
  for (Collective c : {Collective::AllReduce, Collective::Broadcast, Collective::Reduce, Collective::SendRecv}) {
    const CollectiveCounts k = collective_counts(c, 1001, 4, 3);
    EXPECT_EQ(k.send, 250);
    EXPECT_EQ(k.recv, 250);
    EXPECT_EQ(k.printed, 250);
    EXPECT_EQ(k.bytes, 1000);
  }
  // sendrecv of 1 GB in 0.5 s: 2 GB/s, and busbw = algbw.
  const Bandwidth b = collective_bandwidth(Collective::SendRecv, 1000000000, 0.5, 2);
  EXPECT_DOUBLE_EQ(b.algbw, 2.0);
  EXPECT_DOUBLE_EQ(b.busbw, 2.0);
  EXPECT_THROW(collective_bandwidth(Collective::SendRecv, 8, 0.0, 2), Error);
}

TEST(BusBandwidth, NamesAreNcclTests) {
  for (Collective c : all_collectives()) EXPECT_EQ(parse_collective(collective_name(c)), c);
  EXPECT_EQ(collective_name(Collective::AllToAll), "alltoall");
  EXPECT_THROW(parse_collective("all_to_all"), Error);
  EXPECT_TRUE(is_reduction(Collective::ReduceScatter));
  EXPECT_FALSE(is_reduction(Collective::AllGather));
  EXPECT_TRUE(has_root(Collective::Reduce));
  EXPECT_FALSE(has_root(Collective::SendRecv));
}

}  // namespace
}  // namespace tripod::commbench
