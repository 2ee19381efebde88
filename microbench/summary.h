// The summary after the Google Benchmark table: the headline figures per suite, printed and as
// JSON. The JSON file holds one object per suite ("gemm", "kernels"), merged into an existing file,
// so `tripod bench gemm --json r.json && tripod bench kernels --json r.json` leaves one file that
// later tools read. Every rate in it is Google Benchmark's own counter for that benchmark.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "microbench/derived_counters_reporter.h"

namespace tripod::microbench {

nlohmann::json gemm_summary(const BenchSetup& setup, const ResultsBook& book, const Peaks& peaks);
nlohmann::json kernel_summary(const BenchSetup& setup, const ResultsBook& book);
nlohmann::json setup_json(const BenchSetup& setup);

// Printed to `out`: stdout under the console table, stderr when GB prints JSON or CSV to stdout.
void print_gemm_summary(const nlohmann::json& summary, std::FILE* out);
void print_kernel_summary(const nlohmann::json& summary, std::FILE* out);

// Writes `summary` under `suite` into the JSON object in `path` (created if absent).
void merge_summary_json(const std::string& path, const std::string& suite, const nlohmann::json& summary);

}  // namespace tripod::microbench
