// kernel-rate's rows timed one after another (bench/timed_regions.h for each), printed as a table
// and returned as JSON rows. A row that throws (a kernel the device refuses, a fault) is printed
// and recorded with its error and the rest still run, so that one failing row — most likely one of
// the newest, which come last — cannot take every figure before it with it; the caller fails the
// command after writing what was measured.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"

namespace tripod::bench {

struct KernelCase {
  std::string name;
  double bytes = 0;  // moved per call, at least
  std::function<void()> call;
  double flops = 0;  // nominal, for the kernels with products (attention)
};

struct TimedCases {
  nlohmann::json rows = nlohmann::json::array();  // {name, bytes, median_seconds, ...} or {name, error}
  double copy_gbps = 0;                            // the row named "copy": the yardstick of "of copy"
  std::vector<std::string> failed;                 // the names of the rows that threw
};

// After a row that threw, the backend's fp32 GEMM policy is set back to Exact (a row may run under
// Bf16Operands and throw before restoring it).
TimedCases time_kernel_cases(Backend& backend, const std::vector<KernelCase>& cases, int repeat, double min_time_ms);

// Ends a command whose rows were timed one by one (kernel-rate's, gemm-rate's) once it has written
// what was measured: nothing when `failed` is empty, else a tripod::Error naming them, e.g.
// "gemm-rate: 1 of 19 GEMMs failed (lm_head dW); the others were timed and are in g.json".
void fail_naming_failed_rows(const std::string& command, const std::string& rows,
                             const std::vector<std::string>& failed,
                             std::size_t total, const std::string& json_out);

}  // namespace tripod::bench
