// gemm-rate's table (bench/gemm_rate_bench.h): a shape the backend refuses is recorded with its
// error and the shapes after it are still timed, so that one failing shape — on a GPU, one that
// cuBLASLt declines — loses no other figure.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "bench/gemm_rate_bench.h"
#include "core/error.h"

namespace tripod::bench {
namespace {

// The CPU backend, refusing every GEMM with m rows.
class RefusingCpuBackend : public cpu::CpuBackend {
 public:
  explicit RefusingCpuBackend(int64_t refused_m) : cpu::CpuBackend(Device::Host, "cpu"), refused_m_(refused_m) {}
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a, int64_t lda,
            const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc, DType accumulate) override {
    check(m != refused_m_, "the library declines m = ", m);
    cpu::CpuBackend::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, accumulate);
  }

 private:
  int64_t refused_m_;
};

const PeakFlops kPeak{1e12, "a stated peak"};

TEST(GemmRateRows, AShapeThatThrowsIsRecordedAndTheShapesAfterItAreStillTimed) {
  RefusingCpuBackend backend(/*refused_m=*/24);
  const std::vector<GemmCase> cases = {{"square 16", "square", 16, 16, 16, false, false, 0.0, 0},
                                       {"refused", "gpt2", 24, 8, 16, false, true, 0.0, 12},
                                       {"after", "gpt2", 32, 8, 16, true, false, 1.0, 12}};
  const GemmRows rows = time_gemm_cases(backend, cases, DType::F32, DType::F32, 2, 0, kPeak);
  ASSERT_EQ(rows.results.size(), 3u);
  EXPECT_EQ(rows.results[0]["name"], "square 16");
  EXPECT_GT(rows.results[0]["median_tflops"].get<double>(), 0);
  EXPECT_EQ(rows.results[1]["name"], "refused");
  EXPECT_EQ(rows.results[1]["m"], 24);
  EXPECT_FALSE(rows.results[1].contains("median_tflops"));
  EXPECT_NE(rows.results[1]["error"].get<std::string>().find("the library declines m = 24"), std::string::npos);
  EXPECT_EQ(rows.results[2]["name"], "after");
  EXPECT_GT(rows.results[2]["median_seconds"].get<double>(), 0);
  ASSERT_EQ(rows.timings.size(), 2u);
  EXPECT_EQ(rows.timings[1].gemm.name, "after");
  EXPECT_EQ(rows.failed, std::vector<std::string>{"refused"});
  EXPECT_EQ(rows.failed_gpt2, 1);  // the GPT-2 step's sum would miss a row: run_gemm_rate writes none
}

TEST(GemmRateRows, ABadRepeatIsRefusedOnceBeforeAnyShape) {
  RefusingCpuBackend backend(/*refused_m=*/-1);
  const std::vector<GemmCase> cases = {{"square 16", "square", 16, 16, 16, false, false, 0.0, 0}};
  try {
    time_gemm_cases(backend, cases, DType::F32, DType::F32, 0, 0, kPeak);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--repeat must be at least 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tripod::bench
