// What `tripod conform` reports per layout, and the files it writes: one JSON record per layout
// and a JUnit XML suite (a testcase per layout) that CI systems read.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "conform/conformance.h"

namespace tripod::conform {

struct Outcome {
  ParallelLayout layout;
  Errors errors;
  double seconds_per_step = 0;
  std::string fingerprint;  // of the trajectory (conformance.h)
};

nlohmann::json outcome_json(const Outcome& o, const std::string& dtype);
void write_junit(const std::string& path, const std::vector<Outcome>& outcomes, const std::string& dtype);

// The table: its header and one line per layout.
std::string table_header();
std::string table_row(const Outcome& o);

}  // namespace tripod::conform
