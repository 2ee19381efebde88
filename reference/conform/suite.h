// `tripod conform`: every parallel layout the launched ranks allow (or those named) for K steps
// against the single-device reference in the same precision; per layout the largest errors of
// losses, gradient norms and final parameters, pass/fail and time per step, as a table on stdout,
// JSON and JUnit XML. Layouts smaller than the world run as independent replicas on consecutive
// blocks of ranks. Throws (exit 1) if any layout fails.
#pragma once
#include <string>
#include <vector>

namespace tripod::conform {

struct SuiteOptions {
  std::string dtype = "fp64", config, json_out, junit_out, backend = "cpu";
  std::vector<std::string> layouts, overrides, faults;
  int steps = 5;
};

void run_suite(const SuiteOptions& options);

}  // namespace tripod::conform
