// How a bucket's parameters travel under the bf16-operand policy (parallel/bucket_gather_plan.h), in
// ZeRO-1/2's gather after the step and ZeRO-3's gathers on use alike: rounded only where that sends
// fewer bytes than fp32.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/bucket_gather_plan.h"

namespace tripod {
namespace {

TEST(GatherPlans, TheHeadIsCutAtSliceBoundaries) {
  Bucket bucket;
  bucket.size = 960;  // 3 slices of 320
  bucket.used = 890;
  bucket.end = 900;
  bucket.exact = 400;
  const BucketGatherPlan plan = plan_bucket_gather(bucket, 3, true);
  ASSERT_TRUE(plan.rounded);
  ASSERT_EQ(plan.head.size(), 2u);
  EXPECT_EQ(plan.head[0].root, 0);
  EXPECT_EQ(plan.head[0].begin, 0);
  EXPECT_EQ(plan.head[0].length, 320);
  EXPECT_EQ(plan.head[1].root, 1);
  EXPECT_EQ(plan.head[1].begin, 320);
  EXPECT_EQ(plan.head[1].length, 80);
  EXPECT_FALSE(plan_bucket_gather(bucket, 3, false).rounded);  // not asked
  bucket.exact = 100;  // within slice 0: one piece
  ASSERT_EQ(plan_bucket_gather(bucket, 3, true).head.size(), 1u);
  EXPECT_EQ(plan_bucket_gather(bucket, 3, true).head[0].length, 100);
  bucket.exact = 0;  // no head: the bf16 gather alone
  EXPECT_TRUE(plan_bucket_gather(bucket, 3, true).rounded);
  EXPECT_TRUE(plan_bucket_gather(bucket, 3, true).head.empty());
  bucket.exact = 480;  // bf16 [960] + fp32 [480] is as many bytes as fp32 [960]: not worth it
  EXPECT_FALSE(plan_bucket_gather(bucket, 3, true).rounded);
  bucket.exact = 900;  // nothing operand-only
  bucket.used = 900;
  EXPECT_FALSE(plan_bucket_gather(bucket, 3, true).rounded);
  bucket.size = 961;
  EXPECT_THROW(plan_bucket_gather(bucket, 3, true), Error);
}

}  // namespace
}  // namespace tripod
