#include "conform/report.h"

#include <cstdio>
#include <sstream>

#include "core/output_file.h"

namespace tripod::conform {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

std::string junit_text(const std::vector<Outcome>& outcomes, const std::string& running, const std::string& dtype) {
  int failures = 0;
  double total = 0;
  for (const auto& o : outcomes) {
    failures += !o.errors.pass;
    total += o.seconds_per_step;
  }
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"tripod.conform\" tests=\""
      << outcomes.size() + !running.empty() << "\" failures=\"" << failures << "\" errors=\"" << !running.empty()
      << "\" time=\"" << total << "\">\n";
  for (const auto& o : outcomes) {
    out << "    <testcase classname=\"tripod.conform." << dtype << "\" name=\"" << xml_escape(o.name) << "\" time=\""
        << o.seconds_per_step << "\"";
    if (o.errors.pass) {
      out << "/>\n";
    } else if (o.timed_out) {
      out << ">\n      <failure message=\"" << xml_escape(o.errors.failure)
          << "\">the layout did not finish in time: a rank failed alone or it hung</failure>\n    </testcase>\n";
    } else if (o.failed_alone) {
      out << ">\n      <failure message=\"" << xml_escape(o.errors.failure)
          << "\">a rank failed alone while the others waited for it in the layout: the job ended here</failure>"
          << "\n    </testcase>\n";
    } else {
      out << ">\n      <failure message=\"" << xml_escape(o.errors.failure) << "\">loss rel " << o.errors.loss_rel
          << ", grad norm rel " << o.errors.norm_rel << ", parameter rel " << o.errors.param_rel << " ("
          << xml_escape(o.errors.worst_param) << ")</failure>\n    </testcase>\n";
    }
  }
  if (!running.empty())  // the job stopped (or is still) inside this one
    out << "    <testcase classname=\"tripod.conform." << dtype << "\" name=\"" << xml_escape(running)
        << "\">\n      <error message=\"did not finish (still running, aborted or hung)\"/>\n    </testcase>\n";
  out << "  </testsuite>\n</testsuites>\n";
  return out.str();
}

}  // namespace

nlohmann::json outcome_json(const Outcome& o, const std::string& dtype) {
  const ParallelLayout& l = o.layout;
  const Errors& e = o.errors;
  nlohmann::json j = {{"layout", o.name}, {"dtype", dtype}, {"loss_abs_error", e.loss_abs},
                      {"loss_rel_error", e.loss_rel}, {"grad_norm_abs_error", e.norm_abs},
                      {"grad_norm_rel_error", e.norm_rel}, {"param_abs_error", e.param_abs},
                      {"param_rel_error", e.param_rel}, {"worst_param", e.worst_param}, {"pass", e.pass},
                      {"failure", e.failure}, {"error_over_bound", e.error_over_bound}, {"seconds_per_step", o.seconds_per_step}, {"fingerprint", o.fingerprint},
                      {"timed_out", o.timed_out}, {"failed_alone", o.failed_alone}};
  if (o.name.rfind("op:", 0) == 0) return j;
  j.update({{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"zero", l.zero}, {"micro_batches", l.micro_batches},
            {"schedule", l.pipelined() ? schedule_kind_name(l.schedule) : "none"},
            {"sequence_parallel", l.sequence_parallel}, {"head", o.head}, {"peak_mib", o.peak_mib},
            {"accounted_mib", o.accounted_mib}, {"transient_mib", o.transient_mib}});
  return j;
}

std::string table_header() {
  char line[256];
  std::snprintf(line, sizeof line, "%-48s %-6s %10s %10s %10s  %-28s %8s %13s  %s\n", "layout", "head", "loss rel",
                "norm rel", "param rel", "worst parameter", "ms/step", "peak/acct MiB", "result");
  return line;
}

std::string table_row(const Outcome& o) {
  char memory[32] = "";
  if (o.accounted_mib > 0) std::snprintf(memory, sizeof memory, "%.2f/%.2f", o.peak_mib, o.accounted_mib);
  char line[640];
  std::snprintf(line, sizeof line, "%-48s %-6s %10.2e %10.2e %10.2e  %-28s %8.2f %13s  %s\n", o.name.c_str(),
                o.head.c_str(), o.errors.loss_rel, o.errors.norm_rel, o.errors.param_rel, o.errors.worst_param.c_str(),
                1e3 * o.seconds_per_step, memory, o.errors.pass ? "PASS" : ("FAIL: " + o.errors.failure).c_str());
  return line;
}

ReportWriter::ReportWriter(std::string json_path, std::string junit_path, std::string dtype, nlohmann::json header,
                           bool writes_rows)
    : json_path_(std::move(json_path)), junit_path_(std::move(junit_path)), dtype_(std::move(dtype)),
      header_(std::move(header)), writes_rows_(writes_rows) {}

void ReportWriter::running(const Outcome& row) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = row.name;
  running_row_ = row;
  if (writes_rows_) write();
}

void ReportWriter::add(const Outcome& outcome) {
  std::lock_guard<std::mutex> lock(mutex_);
  outcomes_.push_back(outcome);
  running_.clear();
  if (writes_rows_) write();
}

void ReportWriter::fail_rows(const std::vector<std::size_t>& rows, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i : rows) {
    outcomes_.at(i).errors.pass = false;
    outcomes_.at(i).errors.failure = reason;
  }
  if (writes_rows_) write();
}

void ReportWriter::abandon(const std::string& name, const std::string& reason, Ending ending) {
  std::lock_guard<std::mutex> lock(mutex_);
  Outcome o;
  if (running_ == name) o = running_row_;  // its layout and head; nothing measured
  o.name = name;
  o.errors.pass = false;
  o.errors.failure = reason;
  o.timed_out = ending == Ending::TimedOut;
  o.failed_alone = ending == Ending::FailedAlone;
  outcomes_.push_back(o);
  running_.clear();
  write();
}

void ReportWriter::write() {
  if (!json_path_.empty()) {
    nlohmann::json j = header_;
    j["operator_checks"] = nlohmann::json::array();
    j["layouts"] = nlohmann::json::array();
    for (const auto& o : outcomes_)
      j[o.name.rfind("op:", 0) == 0 ? "operator_checks" : "layouts"].push_back(outcome_json(o, dtype_));
    j["running"] = running_.empty() ? nlohmann::json(nullptr) : nlohmann::json(running_);
    write_output_file(json_path_, j.dump(2) + "\n", "JSON report");
  }
  if (!junit_path_.empty()) write_output_file(junit_path_, junit_text(outcomes_, running_, dtype_), "JUnit file");
}

}  // namespace tripod::conform
