// The sizes `tripod bench comm` sweeps (-b, -e, -i, -f as nccl-tests reads them). Near 2^62 the
// next size overflowed int64 and wrapped to 0, so the sweep appended sizes until memory ran out.
#include <gtest/gtest.h>

#include "commbench/plan.h"
#include "support/error_text.h"

namespace tripod::commbench {
namespace {

std::vector<int64_t> sizes(const std::string& b, const std::string& e, int64_t f, const std::string& i = "1M") {
  CommBenchOptions o;
  o.min_bytes = b;
  o.max_bytes = e;
  o.step_factor = f;
  o.step_bytes = i;
  return make_plans(o).front().sizes;
}

TEST(CommBenchSizes, FactorAndIncrementSweeps) {
  EXPECT_EQ(sizes("8", "64", 2), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(sizes("8", "100", 2), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(sizes("1K", "3K", 1, "1K"), (std::vector<int64_t>{1024, 2048, 3072}));
  EXPECT_EQ(sizes("32M", "32M", 1), (std::vector<int64_t>{32 << 20}));
}

TEST(CommBenchSizes, TheLastSizesBefore2To62DoNotOverflow) {
  const std::vector<int64_t> s = sizes("8", "4294967296G", 2);  // -e 2^62
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back(), int64_t{1} << 62);
  EXPECT_EQ(s.size(), 60u);  // 2^3 .. 2^62
  EXPECT_EQ(sizes("4294967295G", "4294967296G", 1, "4294967295G").size(), 1u);  // + -i would pass 2^63
}

TEST(CommBenchSizes, NonsenseStepsAreRefused) {
  EXPECT_NE(expected_error([] { sizes("8", "64", 0); }).find("-f must be >= 1 (got 0"), std::string::npos);
  EXPECT_NE(expected_error([] { sizes("8", "64", -2); }).find("-f must be >= 1 (got -2"), std::string::npos);
  EXPECT_NE(expected_error([] { sizes("8", "1G", 1, "8"); }).find("is more than 100000 sizes"), std::string::npos);
}

std::string plan_error(const std::function<void(CommBenchOptions&)>& change) {
  CommBenchOptions o;
  change(o);
  return expected_error([&] { make_plans(o); });
}

TEST(CommBenchSizes, ABadSizeNamesItsFlag) {
  EXPECT_NE(plan_error([](CommBenchOptions& o) { o.min_bytes = "-4"; }).find("-b: bad size '-4'"), std::string::npos);
  EXPECT_NE(plan_error([](CommBenchOptions& o) { o.max_bytes = "8X"; }).find("-e: bad size '8X'"), std::string::npos);
  EXPECT_NE(plan_error([](CommBenchOptions& o) { o.step_bytes = "-4"; }).find("-i: bad size '-4'"), std::string::npos);
}

TEST(CommBenchSizes, ARootPastIntIsRefusedNotWrapped) {
  // -r 4294967296 ran as root 0 and 2147483648 printed root -2147483648, both exit 0.
  for (const char* root : {"4294967296", "2147483648", "99999999999999999999"})
    EXPECT_NE(plan_error([&](CommBenchOptions& o) { o.root = root; }).find("is not a rank of any group"),
              std::string::npos) << root;
  CommBenchOptions o;
  o.root = "2147483647";
  EXPECT_EQ(make_plans(o).front().root, 2147483647);
}

TEST(CommBenchSizes, ANegativeLayoutIsRefused) {
  // --tp -2 was taken as "not given" and measured the whole world.
  EXPECT_NE(plan_error([](CommBenchOptions& o) { o.tp = -2; }).find("--tp, --pp and --dp must be positive"),
            std::string::npos);
  EXPECT_NE(plan_error([](CommBenchOptions& o) { o.dp = -1; }).find("--tp, --pp and --dp must be positive"),
            std::string::npos);
}

}  // namespace
}  // namespace tripod::commbench
