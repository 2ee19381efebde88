#include "bench/timed_cases.h"

#include <algorithm>
#include <cstdio>

#include "bench/timed_regions.h"
#include "core/error.h"

namespace tripod::bench {

TimedCases time_kernel_cases(Backend& b, const std::vector<KernelCase>& cases, int repeat, double min_time_ms) {
  // The command's own input, refused before any row (time_regions' check would fail each row)
  check(repeat >= 1, "--repeat must be at least 1, got ", repeat);
  // The name column as wide as the longest name, so that the numbers line up under their headers.
  int name_width = 6;
  for (const KernelCase& k : cases) name_width = std::max(name_width, static_cast<int>(k.name.size()));
  std::printf("%-*s %12s %6s %11s %9s %9s %9s %9s\n", name_width, "kernel", "bytes", "calls", "median ms", "GB/s",
              "best", "of copy", "TFLOP/s");
  std::fflush(stdout);
  TimedCases out;
  double copy_rate = 0;
  for (const KernelCase& k : cases) {
    RegionTiming t;
    try {
      t = time_regions(b, k.call, repeat, min_time_ms);
    } catch (const Error& e) {
      b.set_fp32_matmul(Fp32Matmul::Exact);
      std::printf("%-*s FAILED: %s\n", name_width, k.name.c_str(), e.what());
      std::fflush(stdout);
      out.rows.push_back({{"name", k.name}, {"error", e.what()}});
      out.failed.push_back(k.name);
      continue;
    }
    const double rate = k.bytes / t.median_seconds;
    if (k.name == "copy") copy_rate = rate;
    const double of_copy = copy_rate > 0 ? 100.0 * rate / copy_rate : 0;
    const double tflops = k.flops / t.median_seconds / 1e12;
    char tflops_text[32] = "-";
    if (k.flops > 0) std::snprintf(tflops_text, sizeof tflops_text, "%.3f", tflops);
    std::printf("%-*s %12.4g %6lld %11.4f %9.1f %9.1f %8.1f%% %9s\n", name_width, k.name.c_str(), k.bytes,
                static_cast<long long>(t.calls_per_region), 1e3 * t.median_seconds, rate / 1e9, k.bytes / t.best_seconds / 1e9, of_copy,
                tflops_text);
    std::fflush(stdout);
    nlohmann::json r = {{"name", k.name}, {"bytes", k.bytes}, {"calls_per_region", t.calls_per_region},
                        {"median_seconds", t.median_seconds}, {"best_seconds", t.best_seconds},
                        {"median_gbps", rate / 1e9}, {"pct_of_copy", of_copy}};
    if (k.flops > 0) {
      r["nominal_flops"] = k.flops;
      r["nominal_tflops"] = tflops;
    }
    out.rows.push_back(r);
  }
  out.copy_gbps = copy_rate / 1e9;
  return out;
}

void fail_naming_failed_rows(const std::string& command, const std::string& rows,
                             const std::vector<std::string>& failed,
                             std::size_t total, const std::string& json_out) {
  if (failed.empty()) return;
  std::string names;
  for (const std::string& name : failed) names += (names.empty() ? "" : ", ") + name;
  const bool some_timed = failed.size() < total;
  fail(command, ": ", failed.size(), " of ", total, " ", rows, " failed (", names, "); ",
       some_timed ? "the others were timed" : "none was timed",
       some_timed && !json_out.empty() ? " and are in " + json_out : std::string());
}

}  // namespace tripod::bench
