// What `tripod conform` reports per layout (or operator check), and the files it writes: one JSON
// record per row and a JUnit XML suite (a testcase per row) that CI systems read. The files are
// rewritten after every row, and before each row with that row marked as running, so a job that
// is killed (or hangs and is ended by the watchdog) still leaves a report naming where it stopped.
// Rank 0 writes them; a rank that ends the job inside a row (it failed alone) writes them too, with
// the rows so far and its own: every rank holds the same rows, since every row's result is agreed.
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "conform/conformance.h"

namespace tripod::conform {

struct Outcome {
  std::string name;       // the layout's name, or the operator check's ("op:vocab-parallel-loss-tp4")
  ParallelLayout layout;  // undefined for operator checks (ranks() == 1)
  std::string head;       // "tied" or "untied" (layouts)
  Errors errors;
  double seconds_per_step = 0;
  std::string fingerprint;  // of the trajectory (conformance.h)
  // Largest over ranks: allocator peak, the trainer's accounting, and the accounting's transient
  // part (buffers in flight: their overlap, so this, can vary from run to run; the rest does not).
  double peak_mib = 0, accounted_mib = 0, transient_mib = 0;
  bool timed_out = false;                  // did not finish: the watchdog ended the job
  bool failed_alone = false;               // one rank failed while the others still waited in the layout
};

nlohmann::json outcome_json(const Outcome& o, const std::string& dtype);

// The table: its header and one line per row.
std::string table_header();
std::string table_row(const Outcome& o);

class ReportWriter {
 public:
  // Empty paths write nothing. `header` goes into the JSON beside the rows. `writes_rows`: the
  // files are rewritten at every row (rank 0); otherwise only by abandon.
  ReportWriter(std::string json_path, std::string junit_path, std::string dtype, nlohmann::json header,
               bool writes_rows);
  // The next row has started: its name, layout and head (kept for abandon).
  void running(const Outcome& row);
  void add(const Outcome& outcome);  // a row is complete
  // Rows (indices into outcomes()) found wrong after they completed (conform/bit_twins.h): failed
  // with `reason`, and the files rewritten (where this writer writes rows).
  void fail_rows(const std::vector<std::size_t>& rows, const std::string& reason);
  // The running row, `name`, ends the job: a FAIL row with `reason` and the running row's layout
  // fields (they were a default layout's, tp1-pp1-dp1), timed out (from the watchdog's thread) or
  // failed alone. Writes the files whatever `writes_rows` said.
  enum class Ending { TimedOut, FailedAlone };
  void abandon(const std::string& name, const std::string& reason, Ending ending);
  const std::vector<Outcome>& outcomes() const { return outcomes_; }

 private:
  void write();  // with mutex_ held

  std::string json_path_, junit_path_, dtype_;
  nlohmann::json header_;
  bool writes_rows_;
  std::vector<Outcome> outcomes_;
  std::string running_;  // its name; "" between rows
  Outcome running_row_;
  std::mutex mutex_;
};

}  // namespace tripod::conform
