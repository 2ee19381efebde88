// How a bucket's parameters travel under the bf16-operand policy: ZeRO-1/2's gather after the step
// (parallel/updated_param_gather.h) and ZeRO-3's gathers on use (parallel/param_gatherer.h) round
// only where that sends fewer bytes than fp32.
#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/param_gatherer.h"
#include "parallel/updated_param_gather.h"

namespace tripod {
namespace {

TEST(GatherPlans, ZeroOneTwoCutTheHeadAtSliceBoundaries) {
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
  bucket.exact = 480;  // bf16 [960] + fp32 [480] is as many bytes as fp32 [960]: not worth it
  EXPECT_FALSE(plan_bucket_gather(bucket, 3, true).rounded);
  bucket.exact = 900;  // nothing operand-only
  bucket.used = 900;
  EXPECT_FALSE(plan_bucket_gather(bucket, 3, true).rounded);
  bucket.size = 961;
  EXPECT_THROW(plan_bucket_gather(bucket, 3, true), Error);
}

TEST(GatherPlans, ZeroThreeRoundsOnlyWhereTheBytesShrink) {
  Bucket bucket;
  bucket.size = 960;  // 3 slices of 320
  bucket.used = 890;
  bucket.end = 900;
  bucket.exact = 100;  // bf16 [960] + 3 x fp32 [100] < fp32 [960]
  EXPECT_TRUE(zero3_gathers_rounded(bucket, 3, true));
  EXPECT_FALSE(zero3_gathers_rounded(bucket, 3, false));
  bucket.exact = 160;  // 3 x 160 fp32 elements + bf16 [960]: as many bytes as fp32 [960]
  EXPECT_FALSE(zero3_gathers_rounded(bucket, 3, true));
  bucket.exact = 400;  // the head spans two slices: every rank sends its whole slice in fp32 too
  EXPECT_FALSE(zero3_gathers_rounded(bucket, 3, true));
  bucket.exact = 900;  // nothing operand-only
  bucket.used = 900;
  EXPECT_FALSE(zero3_gathers_rounded(bucket, 3, true));
}

}  // namespace
}  // namespace tripod
