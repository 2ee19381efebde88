// How ranks on one machine share its CPUs (comm/core_sharing.h): bound ranks keep their own CPUs,
// unbound ones split the machine, ranks that outnumber the CPUs run one thread each; only the
// ranks of this rank's machine count.
#include <gtest/gtest.h>

#include "comm/core_sharing.h"

namespace tripod {
namespace {

TEST(CoreSharing, ThreadsPerRank) {
  EXPECT_EQ(threads_per_rank(2, 2, 8), 1);    // oversubscribed: 8 ranks on 2 CPUs
  EXPECT_EQ(threads_per_rank(2, 2, 1), 2);    // one process
  EXPECT_EQ(threads_per_rank(16, 16, 4), 4);  // unbound: the machine split four ways
  EXPECT_EQ(threads_per_rank(1, 8, 8), 1);    // bound to a core each
  EXPECT_EQ(threads_per_rank(8, 16, 2), 8);   // bound to a socket each
  EXPECT_EQ(threads_per_rank(8, 16, 4), 4);   // two ranks per socket
}

TEST(CoreSharing, OnlyThisMachinesRanksCount) {
  const std::vector<std::string> all = {"a|0,1,", "a|0,1,", "b|0,1,2,3,", "a|0,1,", "b|0,1,2,3,"};
  const CoreShare on_a = core_share_of(all[0], all);
  EXPECT_EQ(on_a.local_ranks, 3);
  EXPECT_EQ(on_a.machine_cpus, 2);
  EXPECT_EQ(on_a.threads, 1);
  const CoreShare on_b = core_share_of(all[2], all);
  EXPECT_EQ(on_b.local_ranks, 2);
  EXPECT_EQ(on_b.threads, 2);
  // Bound ranks: each its own CPUs, the machine their union.
  const std::vector<std::string> bound = {"n|0,1,2,3,", "n|4,5,6,7,"};
  EXPECT_EQ(core_share_of(bound[1], bound).machine_cpus, 8);
  EXPECT_EQ(core_share_of(bound[1], bound).threads, 4);
  EXPECT_NE(describe(core_share_of(bound[1], bound)).find("2 ranks on this machine, 8 CPUs between them, 4 for this "
                                                          "rank: 4 threads per rank"),
            std::string::npos);
}

// OMP_NUM_THREADS=7 for a rank that mpirun bound to one core (its default for 2 ranks): 7 threads
// take turns on one CPU, which a GPU node's CPU check once ran into without a word.
TEST(CoreSharing, MoreThreadsThanTheRanksCpusIsAWarning) {
  CoreShare share;
  share.local_ranks = 2;
  share.own_cpus = 1;
  share.machine_cpus = 2;
  share.threads = 7;
  share.from_env = true;
  EXPECT_NE(describe(share).find("WARNING: more threads than the 1 CPU this rank may run on"), std::string::npos)
      << describe(share);
  EXPECT_NE(describe(share).find("--map-by slot:PE=7"), std::string::npos);
  share.own_cpus = 7;
  EXPECT_EQ(describe(share).find("WARNING"), std::string::npos) << describe(share);
}

TEST(CoreSharing, ThisProcessDescribesItself) {
  const std::string text = core_share_text();
  ASSERT_NE(text.find('|'), std::string::npos);
  EXPECT_GE(core_share_of(text, {text}).own_cpus, 1);
}

}  // namespace
}  // namespace tripod
