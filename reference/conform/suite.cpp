#include "conform/suite.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>

#include "backend/backend_factory.h"
#include "comm/core_sharing.h"
#include "comm/host_collectives.h"
#include "comm/mpi_communicator.h"
#include "comm/rank_errors.h"
#include "comm/world.h"
#include "conform/bit_twins.h"
#include "conform/lm_heads.h"
#include "conform/lone_failure.h"
#include "conform/op_checks.h"
#include "conform/report.h"
#include "conform/row_agreement.h"
#include "conform/reshard.h"
#include "conform/suite_layouts.h"
#include "conform/watchdog.h"
#include "core/build_info.h"
#include "model/param_spec.h"

namespace tripod::conform {
namespace {

void print_fault_catalogue() {
  std::printf("faults tripod conform can inject (--inject-fault NAME, repeatable):\n");
  for (Fault f : all_faults()) std::printf("  %-30s %s\n", fault_name(f).c_str(), fault_description(f).c_str());
}

RunConfig in_fp64(const RunConfig& config) {
  nlohmann::json j = config.json;
  j["train"]["dtype"] = "fp64";
  return parse_run_config(j);
}

// "1.6e-04 (wte.weight)": the tensor that rounding moves most.
std::string largest_floor(const RunConfig& config, const std::vector<double>& floor) {
  const std::vector<ParamSpec> specs = gpt_param_specs(config.model);
  std::size_t worst = 0;
  for (std::size_t i = 0; i < floor.size(); ++i)
    if (floor[i] > floor[worst]) worst = i;
  char text[32];
  std::snprintf(text, sizeof text, "%.1e", floor.empty() ? 0.0 : floor[worst]);
  return std::string(text) + (floor.empty() ? "" : " (" + specs[worst].name + ")");
}

// World sizes up to 16 on which this model has a layout of more than one rank.
std::string multi_rank_world_sizes(const RunConfig& config) {
  std::string sizes;
  for (int w = 2; w <= 16; ++w)
    for (const ParallelLayout& l : enumerate_layouts(w, config.model, conformance_step(config)))
      if (l.ranks() > 1) {
        sizes += (sizes.empty() ? "" : ", ") + std::to_string(w);
        break;
      }
  return sizes;
}

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// The layout's own timeout reports first (a timeout row in the reports): a wait for peers is
// watched only past it.
CommSettings suite_comm(const SuiteOptions& o) {
  // Checked first (this runs before the world exists): 1e20 overflowed the watchdog's clock and it
  // spun forever, and 1e30 was refused under --comm-timeout's name, as the timeout raised from it.
  check(o.timeout_seconds > 0 && o.timeout_seconds <= 1e9, "--timeout: ", o.timeout_seconds,
        " s is out of range (seconds, (0, 1e9])");
  CommSettings comm = o.comm;
  if (comm.timeout_seconds > 0)
    comm.timeout_seconds = std::min(1e9, std::max(comm.timeout_seconds, o.timeout_seconds + 10));
  return comm;
}

class Suite {
 public:
  explicit Suite(const SuiteOptions& o)
      : o_(o), backend_(make_backend(o.backend)), world_(make_world(*backend_, suite_comm(o))),
        root_(world_->rank() == 0), tied_(suite_config(o, true)), untied_(suite_config(o, false)) {
    check(o.steps >= 2, "--steps must be at least 2 (got ", o.steps,
          "): at one step zero-initialised biases hide bugs that a second step shows");
    check_heads_choice(o.heads);
    check(o.checkpoint_dir.empty() || o.reshard, "--checkpoint-dir is where --reshard's checkpoints go: give "
          "--reshard too (without it there are none)");
    std::vector<Fault> active;
    for (const std::string& name : o.faults) active.push_back(parse_fault(name));
    faults_ = FaultPlan(active, /*poison_released=*/true);
    layouts_ = suite_layouts(o, tied_, world_->size());
  }

  void run() {
    // Before any row: a bad --checkpoint-dir was found after every straight row, and the reports
    // then read as all-green with the command failed.
    const std::filesystem::path reshard_dir = o_.reshard ? reshard_root() : std::filesystem::path();
    reference_tied_ = run_single_device(tied_, o_.steps, *backend_);
    reference_untied_ = run_single_device(untied_, o_.steps, *backend_);
    if (tied_.train.dtype != DType::F64) {
      floor_tied_ = rounding_floor(reference_tied_, run_single_device(in_fp64(tied_), o_.steps, *backend_));
      floor_untied_ = rounding_floor(reference_untied_, run_single_device(in_fp64(untied_), o_.steps, *backend_));
    }
    // Rank 0 writes the reports at every row; the others keep the rows, written only by a rank
    // that ends the job alone (end_job_alone).
    report_ = std::make_unique<ReportWriter>(o_.json_out, o_.junit_out, o_.dtype, json_header(), /*writes_rows=*/root_);
    // Rank 0 writes the reports on a timeout; the others give it a moment before they exit.
    watchdog_ = std::make_unique<Watchdog>(o_.timeout_seconds, root_ ? 0.0 : 5.0, [this](const std::string& name) {
      const std::string error = row_error();
      std::fprintf(stderr, "tripod: error: %s%s did not finish within %g s (a rank failed alone or hung)%s%s; "
                   "ending the job\n", rank_text().c_str(), name.c_str(), o_.timeout_seconds,
                   error.empty() ? "" : "; this rank failed with: ", error.c_str());
      if (root_)
        write_or_say(
            [&] {
              report_->abandon(name, "timeout after " + std::to_string(static_cast<int>(o_.timeout_seconds)) + " s",
                               ReportWriter::Ending::TimedOut);
            });
    });
    if (root_) print_header();
    run_operator_checks();
    for (const ParallelLayout& layout : layouts_) run_one(layout);
    if (o_.reshard) run_reshard_rows(reshard_dir);
    finish();
  }

 private:
  bool tied_for(const ParallelLayout& l) const { return runs_tied_head(o_.heads, l); }
  std::string rank_text() const { return "rank " + std::to_string(world_->rank()) + ": "; }

  nlohmann::json json_header() const {
    return {{"build", build_info_json()}, {"ranks", world_->size()}, {"steps", o_.steps}, {"dtype", o_.dtype}, {"backend", o_.backend},
            {"reference_fingerprint", fingerprint(reference_tied_)},
            {"reference_fingerprint_untied", fingerprint(reference_untied_)}, {"faults", o_.faults}};
  }

  void print_header() const {
    std::string faults;
    for (const std::string& f : o_.faults) faults += (faults.empty() ? "" : ", ") + f;
    int max_ranks = 1;
    for (const ParallelLayout& l : layouts_) max_ranks = std::max(max_ranks, l.ranks());
    std::printf("tripod conform: %d ranks, %s, %d steps, %zu layouts, backend %s, against the single-device "
                "reference (fingerprint %s tied, %s untied)%s\n",
                world_->size(), o_.dtype.c_str(), o_.steps, layouts_.size(), backend_->name().c_str(),
                fingerprint(reference_tied_).c_str(), fingerprint(reference_untied_).c_str(),
                faults.empty() ? "" : (" (fault injected: " + faults + ")").c_str());
    std::printf("model: %s\n", tied_.json["model"].dump().c_str());
    if (const auto share = process_core_share()) std::printf("threads: %s\n", describe(*share).c_str());
    if (!floor_tied_.empty())
      std::printf("rounding floor (largest |%s - fp64| of the reference; parameters%s may differ by twice it): "
                  "tied %s, untied %s\n", o_.dtype.c_str(), rounds_gemm_operands(tied_.train) ? ", losses and norms" : "",
                  largest_floor(tied_, floor_tied_.params).c_str(),
                  largest_floor(untied_, floor_untied_.params).c_str());
    if (world_->size() > 1 && max_ranks == 1)
      std::printf("note: no layout of this model uses more than one rank of %d: every layout runs on one rank, as %d "
                  "replicas. World sizes with multi-rank layouts: %s\n",
                  world_->size(), world_->size(), multi_rank_world_sizes(tied_).c_str());
    std::fputs(table_header().c_str(), stdout);
  }

  // Runs one row on every rank: an error is this rank's FAIL, then every rank agrees.
  template <typename Body>
  void run_row(Outcome& out, Body&& body) {
    // A report rank 0 cannot write (a full disk) is its error alone: it ends the job at once
    // rather than leave the others waiting in the row's collectives.
    run_or_abort_job(*world_, [&] { report_->running(out); });
    watchdog_->arm(out.name);
    const SteadyClock::time_point started = SteadyClock::now();
    std::string my_failure;
    set_row_error("");
    bool left_early = false;  // an error may have left the others waiting in the layout's collectives
    try {
      body();
    } catch (const std::exception& e) {  // tripod::Error or any other (std::bad_alloc): the row fails
      out.errors.pass = false;
      // No error was measured: infinitely far (null in the JSON), not the 0.0 that read as a pass to
      // a consumer of "error_over_bound <= 1 passes" (a NaN loss, a replicated parameter refused).
      out.errors.error_over_bound = std::numeric_limits<double>::infinity();
      my_failure = e.what();
      set_row_error(my_failure);  // for the watchdog's message, should the other ranks not get here
      left_early = true;
    }
    if (!out.errors.pass && my_failure.empty()) my_failure = out.errors.failure;
    meet_at_row_end(out, my_failure, left_early, seconds_since(started));
    agree(*world_, out, my_failure);
    watchdog_->disarm();
    run_or_abort_job(*world_, [&] { report_->add(out); });
    if (root_) {
      std::fputs(table_row(out).c_str(), stdout);
      std::fflush(stdout);
    }
  }

  // Every rank meets at the row's end before agreeing on it. One that left the layout on an error
  // waits there only for its grace (conform/lone_failure.h), then ends the job.
  void meet_at_row_end(const Outcome& out, const std::string& my_failure, bool left_early, double row_seconds) {
    std::unique_ptr<CommRequest> met = world_->barrier_async();
    const double grace = left_early ? lone_failure_grace(row_seconds, o_.timeout_seconds) : -1;
    if (grace < 0)
      met->wait();
    else if (!completes_within(*met, grace))
      end_job_alone(out, my_failure, grace);
  }

  [[noreturn]] void end_job_alone(const Outcome& out, const std::string& my_failure, double grace) {
    watchdog_->disarm();
    char waited[32];
    std::snprintf(waited, sizeof waited, "%g s", grace);
    const bool reports = !o_.json_out.empty() || !o_.junit_out.empty();
    std::fprintf(stderr, "tripod: error: %s%s failed on this rank alone: %s; the other ranks were still inside the "
                 "layout %s later, waiting for this one: ending the job%s\n", rank_text().c_str(), out.name.c_str(),
                 my_failure.c_str(), waited, reports ? " (this rank writes the reports)" : "");
    write_or_say([&] {
      report_->abandon(out.name,
                       rank_text() + my_failure + " (this rank alone: the others still waited for it " + waited + " later)",
                       ReportWriter::Ending::FailedAlone);
    });
    abort_job(3);
  }

  // Writes a report on the way out of the job: a failure is said, and the job still ends.
  void write_or_say(const std::function<void()>& write) {
    try {
      write();
    } catch (const Error& e) {
      std::fprintf(stderr, "tripod: error: %s%s\n", rank_text().c_str(), e.what());
    }
  }

  void run_operator_checks() {
    std::vector<int> sizes;
    for (const ParallelLayout& l : layouts_)
      if (l.tp > 1 && std::find(sizes.begin(), sizes.end(), l.tp) == sizes.end()) sizes.push_back(l.tp);
    for (int t : sizes) {
      Outcome out;
      out.name = "op:vocab-parallel-loss-tp" + std::to_string(t);
      auto group = world_->split(world_->rank() / t, world_->rank(), out.name);
      run_row(out, [&] {
        out.errors = check_vocab_parallel_loss(*group, *backend_, tied_.train.dtype, tied_.model.vocab_size, faults_);
      });
    }
  }

  void run_one(const ParallelLayout& layout) {
    const bool tied = tied_for(layout);
    Outcome out;
    out.name = layout.name();
    out.layout = layout;
    out.head = tied ? "tied" : "untied";
    auto group = world_->split(world_->rank() / layout.ranks(), world_->rank(), layout.name());
    run_row(out, [&] {
      const RunConfig& config = tied ? tied_ : untied_;
      const Trajectory got = run_layout(config, layout, *group, o_.steps, *backend_, faults_);
      out.errors = compare(got, tied ? reference_tied_ : reference_untied_, config, tied ? floor_tied_ : floor_untied_);
      out.seconds_per_step = got.seconds_per_step;
      out.fingerprint = fingerprint(got);
      out.peak_mib = static_cast<double>(got.peak_bytes) / (1 << 20);
      out.accounted_mib = static_cast<double>(got.accounted_bytes) / (1 << 20);
      out.transient_mib = static_cast<double>(got.transient_bytes) / (1 << 20);
    });
  }

  // Layout i saves, layout i+1 loads: every layout is saved once and loaded once.
  void run_reshard_rows(const std::filesystem::path& root) {
    for (std::size_t i = 0; i < layouts_.size(); ++i) {
      const ParallelLayout& saved = layouts_[i];
      const ParallelLayout& loaded = layouts_[(i + 1) % layouts_.size()];
      const bool tied = tied_for(saved);  // one model for both: the checkpoint holds its head
      Outcome out;
      out.name = "ckpt:" + saved.name() + ">" + loaded.name();
      out.layout = loaded;
      out.head = tied ? "tied" : "untied";
      auto save_group = world_->split(world_->rank() / saved.ranks(), world_->rank(), out.name + ":save");
      auto load_group = world_->split(world_->rank() / loaded.ranks(), world_->rank(), out.name + ":load");
      const std::filesystem::path row_root = root / ("row-" + std::to_string(i));
      run_row(out, [&] {
        const RunConfig& config = tied ? tied_ : untied_;
        const ReshardRun run{&saved, save_group.get(), world_->rank() / saved.ranks(), &loaded, load_group.get()};
        const Trajectory got = run_through_checkpoint(config, run, *world_, o_.steps, *backend_, row_root, faults_);
        out.errors = compare(got, tied ? reference_tied_ : reference_untied_, config, tied ? floor_tied_ : floor_untied_);
        out.seconds_per_step = got.seconds_per_step;
        out.fingerprint = fingerprint(got);
      });
    }
    all_reduce_value(*world_, 0.0, ReduceOp::Sum);  // nobody reads the checkpoints any more
    std::error_code ignored;
    if (root_ && o_.checkpoint_dir.empty()) std::filesystem::remove_all(root, ignored);
  }

  // Rank 0 picks the folder (its own temporary one unless --checkpoint-dir, which must be empty or
  // new); every rank uses it, or hears why not.
  std::filesystem::path reshard_root() {
    std::string dir, error;
    if (root_) {
      dir = !o_.checkpoint_dir.empty() ? o_.checkpoint_dir
                                       : (std::filesystem::temp_directory_path() /
                                          ("tripod-conform-" + std::to_string(::getpid()))).string();
      try {
        const bool used = std::filesystem::exists(dir) &&
                          (!std::filesystem::is_directory(dir) || !std::filesystem::is_empty(dir));
        check(!used, "--checkpoint-dir ", dir, " exists and is not an empty folder");
        std::filesystem::create_directories(dir);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    const std::vector<std::string> chosen = all_gather_text(*world_, dir + '\n' + error, 8192);
    const std::string& text = chosen[0];
    const std::size_t split = text.find('\n');
    check(split + 1 == text.size(), "conform --reshard: ", text.substr(split + 1));
    return text.substr(0, split);
  }

  void finish() {
    // Every rank holds the same rows (agreed row by row), so every rank finds the same twins.
    const BitTwinCheck twins = check_bit_twins(report_->outcomes());
    for (const TwinDisagreement& d : twins.disagreements) {
      if (root_) std::printf("FAIL: %s\n", d.reason.c_str());
      report_->fail_rows(d.rows, "bit twins differ: " + d.reason);
    }
    int failed = 0;
    for (const auto& out : report_->outcomes()) failed += !out.errors.pass;
    const std::size_t rows = report_->outcomes().size();
    if (root_)
      std::printf("%zu rows (%zu layouts), %zu passed, %d failed (tolerance: %s; bit twins: %zu of %zu groups agree)\n",
                  rows, layouts_.size(), rows - failed, failed, tolerance_text().c_str(),
                  twins.groups - twins.disagreements.size(), twins.groups);
    if (failed > 0) throw Error(root_ ? std::to_string(failed) + " row(s) failed conformance" : "");
  }

  std::string tolerance_text() const {
    if (o_.dtype == "fp64") return "1e-10 relative";
    if (rounds_gemm_operands(tied_.train))
      return "1e-5 relative + 2x rounding floor, losses and norms too; parameters also + lr*K*1e-3";
    return "1e-5 relative, parameters + lr*K*1e-3 + 2x rounding floor";
  }

  const SuiteOptions& o_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> world_;
  bool root_;
  RunConfig tied_, untied_;
  FaultPlan faults_;
  std::vector<ParallelLayout> layouts_;
  Trajectory reference_tied_, reference_untied_;
  RoundingFloor floor_tied_, floor_untied_;  // fp32, bf16-mixed: how far rounding alone moves the reference
  std::unique_ptr<ReportWriter> report_;
  std::unique_ptr<Watchdog> watchdog_;
  void set_row_error(const std::string& error) {
    std::lock_guard<std::mutex> lock(row_error_mutex_);
    row_error_ = error;
  }
  std::string row_error() {
    std::lock_guard<std::mutex> lock(row_error_mutex_);
    return row_error_;
  }
  std::mutex row_error_mutex_;
  std::string row_error_;  // this rank's error in the current row (the watchdog thread reads it)
};

}  // namespace

void run_suite(const SuiteOptions& o) {
  if (o.list_faults) {
    print_fault_catalogue();
    return;
  }
  if (o.list_layouts_world > 0) {
    print_suite_layouts(o, o.list_layouts_world);
    return;
  }
  MpiRuntime mpi;
  Suite(o).run();
}

}  // namespace tripod::conform
