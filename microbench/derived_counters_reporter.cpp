#include "microbench/derived_counters_reporter.h"

#include <algorithm>

namespace tripod::microbench {
namespace {

double counter_or_zero(const benchmark::BenchmarkReporter::Run& run, const char* name) {
  const auto it = run.counters.find(name);
  return it == run.counters.end() ? 0.0 : it->second.value;
}

bool is_gemm(const BenchInfo& info) { return info.kind == BenchKind::SquareGemm || info.kind == BenchKind::LayerGemm; }

}  // namespace

Sample ResultsBook::Entry::representative() const {
  std::vector<Sample> sorted = samples.empty() ? aggregates : samples;
  if (sorted.empty()) return {};
  const bool by_flops = is_gemm(info);
  std::sort(sorted.begin(), sorted.end(), [by_flops](const Sample& a, const Sample& b) {
    return by_flops ? a.flops_per_second < b.flops_per_second : a.bytes_per_second < b.bytes_per_second;
  });
  return sorted[(sorted.size() - 1) / 2];  // the lower median: always a measured repetition
}

void ResultsBook::record(const benchmark::BenchmarkReporter::Run& run, const BenchInfo& info) {
  const bool iteration = run.run_type == benchmark::BenchmarkReporter::Run::RT_Iteration;
  const bool median = run.run_type == benchmark::BenchmarkReporter::Run::RT_Aggregate && run.aggregate_name == "median";
  if (run.error_occurred || (!iteration && !median)) return;
  const std::string& name = run.run_name.function_name;
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
  if (it == entries_.end()) it = entries_.insert(entries_.end(), Entry{name, info, {}, {}});
  const Sample sample{counter_or_zero(run, kFlopsCounter), counter_or_zero(run, kBytesCounter),
                      run.real_accumulated_time, static_cast<int64_t>(run.iterations)};
  (iteration ? it->samples : it->aggregates).push_back(sample);
  if (info.kind == BenchKind::Stream && name.rfind("stream/triad", 0) == 0)
    triad_bytes_per_second_ = it->representative().bytes_per_second;
}

DerivedCountersReporter::DerivedCountersReporter(benchmark::BenchmarkReporter* inner, const BenchCatalog& catalog,
                                                 const Peaks& peaks, ResultsBook& book, bool records)
    : inner_(inner), catalog_(catalog), peaks_(peaks), book_(book), records_(records) {}

bool DerivedCountersReporter::ReportContext(const Context& context) {
  // RunSpecifiedBenchmarks points this reporter's streams at the console or the --benchmark_out
  // file; the wrapped reporter writes there too.
  inner_->SetOutputStream(&GetOutputStream());
  inner_->SetErrorStream(&GetErrorStream());
  return inner_->ReportContext(context);
}

void DerivedCountersReporter::ReportRuns(const std::vector<Run>& runs) {
  std::vector<Run> annotated = runs;
  for (Run& run : annotated) {
    const auto info = catalog_.find(run.run_name.function_name);
    if (info == catalog_.end() || run.error_occurred) continue;
    if (records_) book_.record(run, info->second);
    // The coefficient-of-variation aggregate is a ratio, not a rate: a percentage of it means nothing.
    if (run.run_type == Run::RT_Aggregate && run.aggregate_unit == benchmark::kPercentage) continue;
    const double flops = counter_or_zero(run, kFlopsCounter), bytes = counter_or_zero(run, kBytesCounter);
    const double peak = peaks_.of(info->second.dtype).flops;
    if (is_gemm(info->second) && flops > 0 && peak > 0)
      run.counters[kPeakPercentCounter] = benchmark::Counter(100.0 * flops / peak);
    const double triad = book_.triad_bytes_per_second();
    if (info->second.kind == BenchKind::Kernel && bytes > 0 && triad > 0)
      run.counters[kTriadPercentCounter] = benchmark::Counter(100.0 * bytes / triad);
  }
  inner_->ReportRuns(annotated);
}

void DerivedCountersReporter::Finalize() { inner_->Finalize(); }

}  // namespace tripod::microbench
