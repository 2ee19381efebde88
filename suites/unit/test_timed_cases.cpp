// kernel-rate's table of timed rows (bench/timed_cases.h): a row that throws is recorded with its
// error and the rows after it are still timed, with the backend's fp32 GEMM policy set back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "bench/timed_cases.h"
#include "core/error.h"

namespace tripod::bench {
namespace {

TEST(TimedCases, ARowThatThrowsIsRecordedAndTheRowsAfterItStillRun) {
  auto be = make_backend("cpu");
  const Tensor x = be->alloc({64}, DType::F32), y = be->alloc({64}, DType::F32);
  be->fill(x, 1.0);
  int after = 0;
  const std::vector<KernelCase> cases = {
      {"copy", 2 * 64 * 4, [&] { be->copy(x, y); }},
      {"refused", 64 * 4, [&] {
         be->set_fp32_matmul(Fp32Matmul::Bf16Operands);  // as a bf16-operand row sets it, then throws
         fail("the device refuses this kernel");
       }},
      {"after", 64 * 4, [&] { ++after; be->copy(y, x); }, 1e6},
  };
  const TimedCases t = time_kernel_cases(*be, cases, 2, 0);
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0]["name"], "copy");
  EXPECT_GT(t.rows[0]["median_seconds"].get<double>(), 0);
  EXPECT_EQ(t.rows[1]["name"], "refused");
  EXPECT_FALSE(t.rows[1].contains("median_seconds"));
  EXPECT_NE(t.rows[1]["error"].get<std::string>().find("the device refuses this kernel"), std::string::npos);
  EXPECT_EQ(t.rows[2]["name"], "after");
  EXPECT_GT(after, 2);  // warm-ups and timed regions
  EXPECT_TRUE(t.rows[2].contains("nominal_tflops"));
  EXPECT_EQ(t.failed, std::vector<std::string>{"refused"});
  EXPECT_GT(t.copy_gbps, 0);
  EXPECT_EQ(be->fp32_matmul(), Fp32Matmul::Exact);
}

// A bad --repeat is the command's input, refused once before any row, not a failure of every row.
TEST(TimedCases, ABadRepeatIsRefusedBeforeAnyRow) {
  auto be = make_backend("cpu");
  int calls = 0;
  const std::vector<KernelCase> cases = {{"counted", 4, [&] { ++calls; }}};
  try {
    time_kernel_cases(*be, cases, 0, 0);
    FAIL() << "--repeat 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--repeat must be at least 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 0);
}

TEST(TimedCases, TheFailureNamesTheFailedRowsAndWhereTheOthersAre) {
  EXPECT_NO_THROW(fail_naming_failed_rows("gemm-rate", "GEMMs", {}, 3, "g.json"));
  try {
    fail_naming_failed_rows("gemm-rate", "GEMMs", {"fc fwd", "lm_head dW"}, 19, "g.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "gemm-rate: 2 of 19 GEMMs failed (fc fwd, lm_head dW); the others were timed and are in g.json");
  }
  try {
    fail_naming_failed_rows("kernel-rate", "rows", {"copy"}, 1, "k.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kernel-rate: 1 of 1 rows failed (copy); none was timed");
  }
}

}  // namespace
}  // namespace tripod::bench
