// Activation recomputation under every kind of parallelism: a layout recomputing (selective or
// full) reproduces the same layout keeping every activation bit for bit - losses, gradient norms
// and parameters - in fp32, where any change in the arithmetic would show. Full recomputation
// reruns tensor-parallel collectives, sequence-parallel gathers and ZeRO-3 parameter gathers in
// backward, with micro-batches of a pipeline in flight; selective recomputation reads qkv and the
// MLP pre-activation of the right micro-batch.
#include <gtest/gtest.h>

#include "support/test_backend.h"
#include "mpi_test_util.h"
#include "conform/conformance.h"

namespace tripod {
namespace {

void expect_bit_identical(const conform::Trajectory& got, const conform::Trajectory& ref, const std::string& what) {
  EXPECT_EQ(got.losses, ref.losses) << what;
  EXPECT_EQ(got.norms, ref.norms) << what;
  ASSERT_EQ(got.params.size(), ref.params.size()) << what;
  for (std::size_t i = 0; i < ref.params.size(); ++i) EXPECT_EQ(got.params[i], ref.params[i]) << what << ": tensor " << i;
}

TEST(RecomputeLayouts, BitIdenticalToKeepingEveryActivation) {
  auto world = testing::test_world();
  const RunConfig config = conform::default_conformance_config("fp32");
  const std::vector<std::string> layouts =
      world->size() >= 4 ? std::vector<std::string>{"tp2-pp2-dp1-z3-mb4-sp-1f1b", "tp1-pp2-dp2-z1-mb4-interleaved-v2",
                                                     "tp2-pp1-dp2-z3-mb2-sp"}
                         : std::vector<std::string>{"tp2-pp1-dp1-z0-mb2-sp", "tp1-pp2-dp1-z0-mb2-afab",
                                                    "tp1-pp1-dp2-z3-mb2"};
  for (const std::string& name : layouts) {
    ParallelLayout kept = ParallelLayout::parse(name);
    if (world->size() < kept.ranks()) continue;
    auto group = world->split(world->rank() < kept.ranks() ? 0 : -1, world->rank(), "recompute");
    if (!group) continue;
    const conform::Trajectory reference = conform::run_layout(config, kept, *group, 3, testing::shared_test_backend());
    for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
      ParallelLayout recomputing = kept;
      recomputing.recompute = mode;
      const conform::Trajectory got =
          conform::run_layout(config, recomputing, *group, 3, testing::shared_test_backend());
      expect_bit_identical(got, reference, recomputing.name());
      // Full recomputation keeps less than everything (the activations are most of this model's).
      EXPECT_LT(got.accounted_bytes, reference.accounted_bytes) << recomputing.name();
    }
  }
  world->barrier();
}

}  // namespace
}  // namespace tripod
