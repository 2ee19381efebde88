// A Google Benchmark reporter that wraps another (the console table, the JSON file) and adds the
// figures GB cannot compute by itself: a GEMM's percentage of the device's peak, and a kernel's
// bandwidth as a percentage of the STREAM triad measured earlier in the same run. The rates
// themselves (flops_per_second, bytes_per_second) are GB's own counters, passed through untouched.
// One of the reporters also records every result in a ResultsBook for the summary.
#pragma once
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "microbench/bench_setup.h"
#include "perf/device_peak.h"

namespace tripod::microbench {

struct Peaks {
  PeakFlops fp32, fp64;
  const PeakFlops& of(DType dtype) const { return dtype == DType::F64 ? fp64 : fp32; }
};

// One benchmark's measurements, as Google Benchmark reported them.
struct Sample {
  double flops_per_second = 0;  // GB's flops_per_second counter (0 if none)
  double bytes_per_second = 0;  // GB's bytes_per_second counter (0 if none)
  double real_seconds = 0;      // GB's accumulated real time over `iterations`
  int64_t iterations = 0;
};

class ResultsBook {
 public:
  struct Entry {
    std::string name;
    BenchInfo info;
    std::vector<Sample> samples;     // one per repetition
    std::vector<Sample> aggregates;  // GB's "median" aggregate, if only aggregates were reported
    // The median repetition by its headline rate (FLOP/s for GEMMs, bytes/s otherwise).
    Sample representative() const;
  };

  void record(const benchmark::BenchmarkReporter::Run& run, const BenchInfo& info);
  const std::vector<Entry>& entries() const { return entries_; }
  double triad_bytes_per_second() const { return triad_bytes_per_second_; }

 private:
  std::vector<Entry> entries_;  // in the order the benchmarks ran
  double triad_bytes_per_second_ = 0;
};

class DerivedCountersReporter final : public benchmark::BenchmarkReporter {
 public:
  // `inner` is not owned. When `records`, results go into `book` (exactly one reporter should).
  DerivedCountersReporter(benchmark::BenchmarkReporter* inner, const BenchCatalog& catalog, const Peaks& peaks,
                          ResultsBook& book, bool records);

  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;

 private:
  benchmark::BenchmarkReporter* inner_;
  const BenchCatalog& catalog_;
  const Peaks& peaks_;
  ResultsBook& book_;
  bool records_;
};

}  // namespace tripod::microbench
