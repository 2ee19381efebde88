// The GEMM benchmark's figure is Google Benchmark's own: flops_per_second equals 2 n^3 per
// iteration times GB's iteration count over GB's measured real time, and the percentages and the
// summary are computed from that counter, not from a second stopwatch.
#include <gtest/gtest.h>

#include "support/test_backend.h"
#include "microbench/bench_setup.h"
#include "microbench/derived_counters_reporter.h"
#include "microbench/summary.h"

namespace tripod::microbench {
namespace {

using GbRun = benchmark::BenchmarkReporter::Run;

class CapturingReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<GbRun>& runs) override {
    captured.insert(captured.end(), runs.begin(), runs.end());
  }
  std::vector<GbRun> captured;
};

const Peaks kTestPeaks{{1e11, "test fp32 peak"}, {5e10, "test fp64 peak"}};

TEST(GemmCounters, RateIsFlopsOverGoogleBenchmarksRealTime) {
  auto backend = testing::make_test_backend();
  BenchCatalog catalog;
  const int64_t n = 64;
  register_square_gemm(*backend, n, DType::F32, catalog)->MinTime(0.02);
  CapturingReporter capture;
  ResultsBook book;
  DerivedCountersReporter reporter(&capture, catalog, kTestPeaks, book, /*records=*/true);
  ASSERT_EQ(benchmark::RunSpecifiedBenchmarks(&reporter, "^sgemm/square/64/"), 1u);

  ASSERT_EQ(capture.captured.size(), 1u);
  const GbRun& run = capture.captured[0];
  ASSERT_FALSE(run.error_occurred) << run.error_message;
  ASSERT_GT(run.iterations, 0);
  const double flop_count = 2.0 * n * n * n * static_cast<double>(run.iterations);
  const double reported = run.counters.at(kFlopsCounter).value;
  EXPECT_NEAR(reported / (flop_count / run.real_accumulated_time), 1.0, 1e-9);
  // The same through the per-iteration time GB prints (in the benchmark's unit, microseconds).
  const double seconds_per_iteration = run.GetAdjustedRealTime() * 1e-6;
  EXPECT_NEAR(reported / (2.0 * n * n * n / seconds_per_iteration), 1.0, 1e-9);

  // The derived percentage is of that counter.
  EXPECT_NEAR(run.counters.at(kPeakPercentCounter).value, 100 * reported / kTestPeaks.fp32.flops, 1e-9);

  // The summary's sgemm figure is the counter, unchanged.
  BenchSetup setup;
  const nlohmann::json summary = gemm_summary(setup, book, kTestPeaks);
  ASSERT_TRUE(summary.contains("sgemm_best"));
  EXPECT_EQ(summary["sgemm_best"]["size"].get<int64_t>(), n);
  EXPECT_NEAR(summary["sgemm_best"]["tflops"].get<double>() * 1e12 / reported, 1.0, 1e-12);
  EXPECT_NEAR(summary["sgemm_best"]["pct_of_peak"].get<double>(), 100 * reported / kTestPeaks.fp32.flops, 1e-9);
}

GbRun synthetic_run(const std::string& name, const char* counter, double value) {
  GbRun run;
  run.run_name.function_name = name;
  run.iterations = 10;
  run.real_accumulated_time = 1.0;
  run.counters[counter] = benchmark::Counter(value);
  return run;
}

TEST(DerivedCounters, KernelBandwidthIsAPercentageOfTheTriadSeenEarlier) {
  BenchCatalog catalog;
  catalog["stream/triad/256MiB"] = BenchInfo{BenchKind::Stream, DType::F64, "3 x 256MiB", 0, 24.0 * 1024, 0};
  catalog["kernel/gelu_fwd/4x8"] = BenchInfo{BenchKind::Kernel, DType::F32, "4x8", 0, 256, 0};
  CapturingReporter capture;
  ResultsBook book;
  DerivedCountersReporter reporter(&capture, catalog, kTestPeaks, book, /*records=*/true);

  // Before any triad there is nothing to compare with: no percentage rather than a wrong one.
  reporter.ReportRuns({synthetic_run("kernel/gelu_fwd/4x8", kBytesCounter, 4e9)});
  EXPECT_EQ(capture.captured.back().counters.count(kTriadPercentCounter), 0u);

  reporter.ReportRuns({synthetic_run("stream/triad/256MiB", kBytesCounter, 8e9)});
  EXPECT_DOUBLE_EQ(book.triad_bytes_per_second(), 8e9);
  reporter.ReportRuns({synthetic_run("kernel/gelu_fwd/4x8", kBytesCounter, 4e9)});
  EXPECT_DOUBLE_EQ(capture.captured.back().counters.at(kTriadPercentCounter).value, 50.0);

  BenchSetup setup;
  const nlohmann::json summary = kernel_summary(setup, book);
  EXPECT_DOUBLE_EQ(summary["stream"]["triad_gbps"].get<double>(), 8.0);
  ASSERT_EQ(summary["kernels"].size(), 1u);
  EXPECT_DOUBLE_EQ(summary["kernels"][0]["gbps"].get<double>(), 4.0);
}

TEST(DerivedCounters, RepetitionsSummariseToTheMedianRepetition) {
  BenchCatalog catalog;
  catalog["sgemm/square/8"] = BenchInfo{BenchKind::SquareGemm, DType::F32, "8x8x8", 1024, 0, 8};
  CapturingReporter capture;
  ResultsBook book;
  DerivedCountersReporter reporter(&capture, catalog, kTestPeaks, book, /*records=*/true);
  reporter.ReportRuns({synthetic_run("sgemm/square/8", kFlopsCounter, 3e9),
                       synthetic_run("sgemm/square/8", kFlopsCounter, 1e9),
                       synthetic_run("sgemm/square/8", kFlopsCounter, 2e9)});
  ASSERT_EQ(book.entries().size(), 1u);
  EXPECT_DOUBLE_EQ(book.entries()[0].representative().flops_per_second, 2e9);
  EXPECT_DOUBLE_EQ(capture.captured[0].counters.at(kPeakPercentCounter).value, 3.0);  // 3e9 / 1e11
}

}  // namespace
}  // namespace tripod::microbench
