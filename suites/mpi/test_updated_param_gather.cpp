// ZeRO-1/2's all-gather after the step (parallel/updated_param_gather.h), on every world size: each
// rank's slices stay its exact masters, the exact heads arrive exact (from one or several ranks'
// slices), the operand-only weights arrive as their bf16 rounding, and the bytes and the scratch
// memory are what the plan says. Without bf16 operand gathers every value arrives exact. Overlapped
// (left in flight, each bucket waited for in any order) the values are the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "support/test_backend.h"
#include "backend/transfer.h"
#include "core/bf16.h"
#include "parallel/updated_param_gather.h"

namespace tripod {
namespace {

// A value with bits below bf16's precision, different for every element.
double exact_value(int64_t i) { return 1.0 + 0.001 * static_cast<double>(i % 997) + 3e-7 * static_cast<double>(i % 7); }

ParamSpec spec(const std::string& name, int64_t n, ParamRole role, int group) {
  ParamSpec s;
  s.name = name;
  s.shape = {n};
  s.role = role;
  s.group = group;
  return s;
}

// Three buckets (so that the two-bucket window moves): a LayerNorm-only one (fp32 alone), and two
// of a large exact head (700, which spans two slices from 3 ranks on) before a weight.
std::vector<ParamSpec> specs() {
  return {spec("ln_only.weight", 300, ParamRole::LnFWeight, 0), spec("h.0.ln_1.weight", 700, ParamRole::Ln1Weight, 1),
          spec("h.0.attn.c_attn.weight", 1000, ParamRole::QkvWeight, 1),
          spec("h.1.ln_1.weight", 40, ParamRole::Ln1Weight, 2),
          spec("h.1.mlp.c_fc.weight", 2000, ParamRole::FcWeight, 2)};
}

// The full parameters as this rank holds them before a gather: its slices exact, `others` elsewhere.
std::vector<double> own_slices(const ShardLayout& layout, int rank, double others) {
  std::vector<double> host(static_cast<std::size_t>(layout.total()), others);
  for (std::size_t b = 0; b < layout.buckets().size(); ++b) {
    const int64_t first = layout.slice_start(static_cast<int>(b), rank);
    for (int64_t i = first; i < first + layout.buckets()[b].size / layout.dp(); ++i)
      host[static_cast<std::size_t>(i)] = exact_value(i);
  }
  return host;
}

struct Gathered {
  std::vector<double> full;
  int64_t bytes = 0;
  TransientMemory memory;
};

// Overlapped: the buckets waited for last to first (the order the model reaches them need not be
// the order they were started in), then every one.
Gathered gather(const ShardLayout& layout, Communicator& dp, bool bf16, bool overlapped = false) {
  Backend& be = testing::shared_test_backend();
  // This rank's slices hold the exact values; every other element is NaN until gathered.
  const std::vector<double> host = own_slices(layout, dp.rank(), std::numeric_limits<double>::quiet_NaN());
  Tensor full = be.alloc({layout.total()}, DType::F32);
  from_host_f64(be, host, full);
  Gathered g;
  {
    UpdatedParamGather gathers(layout, full, dp, be, g.memory, bf16, overlapped);
    EXPECT_EQ(gathers.done(), !overlapped);
    if (overlapped) {
      for (std::size_t b = layout.buckets().size(); b-- > 0;) gathers.wait_bucket(b);
      EXPECT_TRUE(gathers.done());
      gathers.wait_all();  // nothing left: a no-op
    }
    g.bytes = gathers.received_bytes();
  }
  g.full = to_host_f64(be, full);
  return g;
}

TEST(UpdatedParamGather, OwnSlicesStayExactHeadsArriveExactWeightsAsBf16) {
  auto world = testing::test_world();
  const std::vector<ParamSpec> s = specs();
  const std::vector<int> groups = {0, 1, 1, 2, 2};
  const ShardLayout layout(s, groups, world->size(), /*bucket_elements=*/1, false, {}, 0, gemm_operand_only_flags(s));
  ASSERT_EQ(layout.buckets().size(), 3u);
  const Gathered exact = gather(layout, *world, false);
  const Gathered rounded = gather(layout, *world, true);
  int64_t exact_bytes = 0, rounded_bytes = 0;
  std::size_t largest_scratch = 0, every_scratch = 0;
  for (std::size_t b = 0; b < layout.buckets().size(); ++b) {
    const Bucket& bucket = layout.buckets()[b];
    const BucketGatherPlan plan = plan_bucket_gather(bucket, layout.dp(), true);
    EXPECT_EQ(plan.rounded, b != 2) << "bucket " << b;  // buckets in backward order: the LayerNorm's last
    exact_bytes += bucket.size * 4;
    rounded_bytes += plan.rounded ? bucket.size * 2 + bucket.exact * 4 : bucket.size * 4;
    if (plan.rounded) largest_scratch = std::max(largest_scratch, static_cast<std::size_t>(bucket.size * 2));
    if (plan.rounded) every_scratch += static_cast<std::size_t>(bucket.size * 2 + bucket.size / layout.dp() * 2);
    const int64_t slice = bucket.size / layout.dp();
    if (plan.rounded) {
      ASSERT_GT(bucket.end, bucket.used) << "bucket " << b;  // a gap aligns the weight
    }
    for (int64_t at = 0; at < bucket.end; ++at) {
      const int64_t i = bucket.start + at;
      const double want = exact_value(i);
      ASSERT_EQ(exact.full[static_cast<std::size_t>(i)], static_cast<double>(static_cast<float>(want))) << i;
      const bool own = at / slice == world->rank();
      const double got = rounded.full[static_cast<std::size_t>(i)];
      if (!plan.rounded || own || at < bucket.exact)
        ASSERT_EQ(got, static_cast<double>(static_cast<float>(want))) << "bucket " << b << " element " << at;
      else
        ASSERT_EQ(got, static_cast<double>(bf16_to_float(float_to_bf16(static_cast<float>(want)))))
            << "bucket " << b << " element " << at;
    }
  }
  EXPECT_EQ(exact.bytes, exact_bytes);
  EXPECT_EQ(rounded.bytes, rounded_bytes);
  EXPECT_LT(rounded.bytes, exact.bytes);
  EXPECT_EQ(exact.memory.peak, 0u);
  EXPECT_EQ(rounded.memory.current, 0u);  // every scratch buffer returned
  // Two rounded buckets at most at once: their gathered bf16 buckets and sent slices.
  EXPECT_GT(rounded.memory.peak, 0u);
  EXPECT_LE(rounded.memory.peak, 2 * (largest_scratch + largest_scratch / static_cast<std::size_t>(layout.dp())));

  // Overlapped: the same bits and bytes; every rounded bucket's buffers were alive at once.
  for (bool bf16 : {false, true}) {
    const Gathered overlapped = gather(layout, *world, bf16, /*overlapped=*/true);
    const Gathered& blocking = bf16 ? rounded : exact;
    for (std::size_t i = 0; i < blocking.full.size(); ++i)
      if (!std::isnan(blocking.full[i])) {
        ASSERT_EQ(overlapped.full[i], blocking.full[i]) << "bf16 " << bf16 << " " << i;
      }
    EXPECT_EQ(overlapped.bytes, blocking.bytes);
    EXPECT_EQ(overlapped.memory.current, 0u);
    EXPECT_EQ(overlapped.memory.peak, bf16 ? every_scratch : 0u);  // every rounded bucket's, at once
  }
}

// A gather left in flight is completed by its destructor on every rank (collectives started must
// complete), and then holds the same values.
TEST(UpdatedParamGather, AnOverlappedGatherNeverWaitedForCompletesOnDestruction) {
  auto world = testing::test_world();
  const std::vector<ParamSpec> s = specs();
  const ShardLayout layout(s, {0, 1, 1, 2, 2}, world->size(), 1, false, {}, 0, gemm_operand_only_flags(s));
  Backend& be = testing::shared_test_backend();
  const std::vector<double> host = own_slices(layout, world->rank(), 0.0);
  Tensor full = be.alloc({layout.total()}, DType::F32);
  from_host_f64(be, host, full);
  TransientMemory memory;
  { UpdatedParamGather left(layout, full, *world, be, memory, /*bf16=*/false, /*overlapped=*/true); }
  const std::vector<double> got = to_host_f64(be, full);
  for (const Bucket& bucket : layout.buckets())
    for (int64_t at = 0; at < bucket.used; ++at)
      ASSERT_EQ(got[static_cast<std::size_t>(bucket.start + at)],
                static_cast<double>(static_cast<float>(exact_value(bucket.start + at))));
}

// The unwaited-param-gather fault's form (parallel/fault_plan.h): an fp32 bucket lands only when it
// is waited for, whatever the communicator's progress, so that a forward that skips the wait reads
// the old values every time. In place, a gather that completed early (Open MPI's on two ranks,
// where the peer's message may already be there when the gather starts) hid the missing wait: the
// fault then went uncaught in one CI run of test_conform_faults.py (2026-12-06).
TEST(UpdatedParamGather, TheFaultsGatherLandsOnlyWhenWaitedFor) {
  auto world = testing::test_world();
  if (world->size() < 2) GTEST_SKIP() << "a gather of one rank's slices changes nothing";
  const std::vector<ParamSpec> s = specs();
  const ShardLayout layout(s, {0, 1, 1, 2, 2}, world->size(), 1, false, {}, 0, gemm_operand_only_flags(s));
  Backend& be = testing::shared_test_backend();
  const std::vector<double> host = own_slices(layout, world->rank(), -1.0);  // the others' slices: old values
  Tensor full = be.alloc({layout.total()}, DType::F32);
  from_host_f64(be, host, full);
  TransientMemory memory;
  UpdatedParamGather gathers(layout, full, *world, be, memory, /*bf16=*/false, /*overlapped=*/true,
                             /*round_own_slices=*/false, /*land_when_waited=*/true);
  EXPECT_GT(memory.current, 0u);  // the landing buffers are counted while they exist
  world->barrier();           // every rank's gathers started: on MPI they may well have arrived
  for (std::size_t b = 0; b < layout.buckets().size(); ++b) {
    const Bucket& bucket = layout.buckets()[b];
    const int64_t own = layout.slice_start(static_cast<int>(b), world->rank()), slice = bucket.size / layout.dp();
    std::vector<double> got = to_host_f64(be, full);
    for (int64_t at = bucket.start; at < bucket.start + bucket.used; ++at) {
      if (at < own || at >= own + slice) {
        ASSERT_EQ(got[static_cast<std::size_t>(at)], -1.0) << "bucket " << b;
      }
    }
    gathers.wait_bucket(b);
    got = to_host_f64(be, full);
    for (int64_t at = bucket.start; at < bucket.start + bucket.used; ++at)
      ASSERT_EQ(got[static_cast<std::size_t>(at)], static_cast<double>(static_cast<float>(exact_value(at))))
          << "bucket " << b;
  }
  EXPECT_TRUE(gathers.done());
  EXPECT_EQ(memory.current, 0u);
}

}  // namespace
}  // namespace tripod
