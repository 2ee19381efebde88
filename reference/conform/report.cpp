#include "conform/report.h"

#include <cstdio>
#include <fstream>

namespace tripod::conform {
namespace {
std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}
}  // namespace

nlohmann::json outcome_json(const Outcome& o, const std::string& dtype) {
  const ParallelLayout& l = o.layout;
  const Errors& e = o.errors;
  return {{"layout", l.name()}, {"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"zero", l.zero},
          {"micro_batches", l.micro_batches}, {"schedule", l.pipelined() ? schedule_kind_name(l.schedule) : "none"},
          {"sequence_parallel", l.sequence_parallel}, {"dtype", dtype}, {"loss_abs_error", e.loss_abs},
          {"loss_rel_error", e.loss_rel}, {"grad_norm_abs_error", e.norm_abs}, {"grad_norm_rel_error", e.norm_rel},
          {"param_abs_error", e.param_abs}, {"param_rel_error", e.param_rel}, {"worst_param", e.worst_param},
          {"pass", e.pass}, {"failure", e.failure}, {"seconds_per_step", o.seconds_per_step},
          {"fingerprint", o.fingerprint}};
}

void write_junit(const std::string& path, const std::vector<Outcome>& outcomes, const std::string& dtype) {
  int failures = 0;
  double total = 0;
  for (const auto& o : outcomes) {
    failures += !o.errors.pass;
    total += o.seconds_per_step;
  }
  std::ofstream out(path);
  check(out.good(), "cannot write JUnit file ", path);
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"tripod.conform\" tests=\""
      << outcomes.size() << "\" failures=\"" << failures << "\" time=\"" << total << "\">\n";
  for (const auto& o : outcomes) {
    out << "    <testcase classname=\"tripod.conform." << dtype << "\" name=\"" << o.layout.name() << "\" time=\""
        << o.seconds_per_step << "\"";
    if (o.errors.pass) {
      out << "/>\n";
    } else {
      out << ">\n      <failure message=\"" << xml_escape(o.errors.failure) << " outside tolerance\">loss rel "
          << o.errors.loss_rel << ", grad norm rel " << o.errors.norm_rel << ", parameter rel " << o.errors.param_rel
          << " (" << xml_escape(o.errors.worst_param) << ")</failure>\n    </testcase>\n";
    }
  }
  out << "  </testsuite>\n</testsuites>\n";
}

std::string table_header() {
  char line[256];
  std::snprintf(line, sizeof line, "%-38s %10s %10s %10s  %-28s %10s  %s\n", "layout", "loss rel", "norm rel",
                "param rel", "worst parameter", "ms/step", "result");
  return line;
}

std::string table_row(const Outcome& o) {
  char line[512];
  std::snprintf(line, sizeof line, "%-38s %10.2e %10.2e %10.2e  %-28s %10.2f  %s\n", o.layout.name().c_str(),
                o.errors.loss_rel, o.errors.norm_rel, o.errors.param_rel, o.errors.worst_param.c_str(),
                1e3 * o.seconds_per_step, o.errors.pass ? "PASS" : ("FAIL: " + o.errors.failure).c_str());
  return line;
}

}  // namespace tripod::conform
