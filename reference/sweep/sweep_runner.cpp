#include "sweep/sweep_runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_root.h"
#include "core/error.h"
#include "core/host_cpus.h"
#include "core/output_file.h"
#include "process/child_process.h"
#include "sweep/run_record.h"
#include "sweep/sweep_progress.h"

namespace tripod::sweep {
namespace fs = std::filesystem;
using namespace tripod::process;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

RunPaths run_paths(const fs::path& out_dir, const std::string& run_name) {
  const fs::path dir = fs::absolute(out_dir) / "runs" / run_name;
  return {dir, dir / "config.json", dir / "train.log", dir / "metrics.jsonl", dir / "ckpt", dir / "result.json"};
}

void place_runs(std::vector<PlannedRun>& grid, const fs::path& out_dir) {
  for (PlannedRun& run : grid) run.config["train"]["metrics"] = run_paths(out_dir, run.name).metrics.string();
}

namespace {

// Written beside and renamed into place, so a reader never sees half a file.
void write_json_file(const fs::path& path, const json& j, int indent = 2) {
  write_output_file(path.string(), j.dump(indent) + "\n", "the sweep's record");
}

std::optional<json> read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  json j = json::parse(in, nullptr, false);
  return j.is_discarded() ? std::nullopt : std::optional<json>(j);
}

// False when the line did not reach the file (a full disk): the caller says so.
bool append_line(const fs::path& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
  out.flush();
  return out.good();
}

bool is_final(const json& result) {
  const std::string status = result.value("status", "");
  return status == "ok" || status == "diverged";
}

// Refuses to mix results of two configurations in one run directory.
void check_same_config(const SweepSpec& spec, const PlannedRun& run, const RunPaths& paths) {
  const std::optional<json> existing = read_json_file(paths.config);
  if (!existing || *existing == run.config) return;
  const bool has_results = fs::exists(paths.result) || ckpt::find_latest(paths.ckpt).has_value();
  TRIPOD_CHECK(!has_results, spec.file.string(), ": run ", run.name, " in ", paths.dir.string(),
               " was trained with a different configuration (config hash ", config_hash(*existing), ", now ",
               config_hash(run.config), "): the spec changed since; delete ", paths.dir.string(),
               " to redo the run, or use another --out");
}

// The step a relaunch resumes from (0: start afresh). A save killed midway left only leftovers,
// which the trainer removes; the previous checkpoint is still the latest.
int64_t checkpoint_step(const RunPaths& paths) {
  const auto latest = ckpt::find_latest(paths.ckpt);
  return latest ? ckpt::CheckpointReader(*latest).manifest().step : 0;
}

RunOutcome judge_exit(const ChildExit& exit, const RunPaths& paths, const PlannedRun& run, double seconds) {
  RunOutcome outcome;
  outcome.wall_seconds = seconds;
  outcome.metrics = summarize_metrics(paths.metrics);
  const std::string error = last_error_line(paths.log);
  if (!exit.signaled && exit.code == 0) {
    outcome.status = outcome.metrics.last_step + 1 == run.steps ? RunStatus::Ok : RunStatus::Failed;
    if (outcome.status == RunStatus::Failed)
      outcome.error = "exited normally but its metrics end at step " + std::to_string(outcome.metrics.last_step + 1) +
                      " of " + std::to_string(run.steps);
  } else {
    // The trainer stops on a non-finite loss or gradient norm with "(training diverged)".
    const bool diverged = !exit.signaled && error.find("training diverged") != std::string::npos;
    outcome.status = diverged ? RunStatus::Diverged : RunStatus::Failed;
    outcome.error = error.empty() ? describe_exit(exit) : error;
  }
  return outcome;
}

struct Running {
  const PlannedRun* run;
  RunPaths paths;
  Clock::time_point started;
};

// The sweep's record of what was asked: the spec, the corpus and the grid (what `tripod scale fit`
// reads back).
void write_manifest(const fs::path& out, const SweepSpec& spec, const CorpusInfo& corpus,
                    const std::vector<PlannedRun>& grid) {
  json grid_json = json::array();
  for (const PlannedRun& r : grid)
    grid_json.push_back({{"name", r.name}, {"N", r.n}, {"D", r.tokens}, {"C", r.flops}, {"budget", budget_label(r.budget)}, {"steps", r.steps}});
  write_json_file(out / "sweep.json", {{"spec_file", fs::absolute(spec.file).string()}, {"spec", spec.json},
                                       {"corpus", {{"dir", corpus.dir.string()}, {"vocab", corpus.vocab},
                                                   {"train_tokens", corpus.train_tokens},
                                                   {"train_tokens_xxh64", corpus.train_tokens_xxh64},
                                                   {"entropy_rate_nats", corpus.entropy_rate_nats}}},
                                       {"grid", grid_json}});
}

// A sweep run again must find the corpus its runs were trained on: their configurations name the
// corpus's folder, not its tokens, so a corpus rewritten in place since would have the runs still
// to train trained on other data than the finished ones, and the fit mix the two. sweep.json (from
// the previous `scale run`) records the training tokens' XXH64; sweeps recorded before it did
// are not checked.
void check_same_corpus(const SweepSpec& spec, const fs::path& out, const CorpusInfo& corpus,
                       const std::vector<PlannedRun>& grid) {
  const std::optional<json> previous = read_json_file(out / "sweep.json");
  if (!previous || !previous->contains("corpus") || !(*previous)["corpus"].is_object()) return;
  const std::string recorded = (*previous)["corpus"].value("train_tokens_xxh64", "");
  if (recorded.empty() || recorded == corpus.train_tokens_xxh64) return;
  const bool trained = std::any_of(grid.begin(), grid.end(), [&](const PlannedRun& run) {
    const RunPaths paths = run_paths(out, run.name);
    return fs::exists(paths.result) || ckpt::find_latest(paths.ckpt).has_value();
  });
  TRIPOD_CHECK(!trained, spec.file.string(), ": the runs in ", (out / "runs").string(),
               " were trained on a corpus whose training tokens' XXH64 is ", recorded, " (", (out / "sweep.json").string(),
               "), but ", corpus.dir.string(), " holds ", corpus.train_tokens_xxh64,
               " now: another corpus; delete ", (out / "runs").string(), " to train them all on it, or use another --out");
}

// The runs without a final result of their current configuration (counting the others as already
// finished), largest budgets first: the longest runs start early, which shortens the sweep's tail.
std::deque<const PlannedRun*> runs_to_train(const SweepSpec& spec, const std::vector<PlannedRun>& grid,
                                            const fs::path& out, int& already_finished) {
  std::deque<const PlannedRun*> pending;
  std::vector<std::pair<const PlannedRun*, json>> finished;  // recounted after every check passed
  // Records finished before the held-out windows took one fixed order measured their eval loss on
  // windows chosen by the run's seed; the runs still to train would use the fixed order, and the fit
  // would mix the two. A finished old sweep (nothing left to train) is consistent and stays as it is.
  int old_windows = 0;
  for (const PlannedRun& run : grid) {
    const RunPaths paths = run_paths(out, run.name);
    check_same_config(spec, run, paths);
    const std::optional<json> result = read_json_file(paths.result);
    old_windows += result && is_final(*result) && !result->contains("held_out_order");
    if (result && is_final(*result) && result->value("config_hash", "") == config_hash(run.config))
      finished.emplace_back(&run, *result);
    else
      pending.push_back(&run);
  }
  TRIPOD_CHECK(old_windows == 0 || pending.empty(), spec.file.string(), ": ", old_windows, " finished run",
               old_windows == 1 ? "" : "s", " in ", (out / "runs").string(), " measured the eval loss on held-out windows ",
               "chosen by train.seed (a Tripod before 2026-12-07), the ", pending.size(), " still to train would use ",
               "one fixed order, and the fit would mix the two: delete ", (out / "runs").string(),
               " to train the sweep again, or give another --out");
  // Only now, every check passed, are records rewritten: a refusal leaves the folder as it was.
  for (const auto& [run, result] : finished) {
    ++already_finished;
    json recounted = result;
    recounted.update(counting_fields(spec, *run));
    if (recounted == result) continue;
    write_json_file(run_paths(out, run->name).result, recounted);
    std::printf("tripod scale: %s: its record recounted under the spec's conventions (param_count %s, flops %s: "
                "N %s, C %s); the run itself is the same\n",
                run->name.c_str(), recounted["param_count"].get<std::string>().c_str(),
                recounted["flops_convention"].get<std::string>().c_str(), recounted["N"].dump().c_str(),
                recounted["C"].dump().c_str());
  }
  std::stable_sort(pending.begin(), pending.end(), [](const PlannedRun* a, const PlannedRun* b) { return a->budget > b->budget; });
  return pending;
}

// runs.jsonl in grid order, one record per run with a result (redone runs appear once).
void rewrite_runs_jsonl(const fs::path& out, const std::vector<PlannedRun>& grid) {
  std::string lines;
  for (const PlannedRun& run : grid)
    if (const auto result = read_json_file(run_paths(out, run.name).result)) lines += result->dump() + "\n";
  write_output_file((out / "runs.jsonl").string(), lines, "the sweep's runs.jsonl (each run's record is in "
                    "runs/<name>/result.json)");
}

// The scheduling loop's state: the runs waiting, the children training, and the tallies the
// progress lines and the final summary report.
class Scheduler {
 public:
  Scheduler(const SweepSpec& spec, fs::path out, int jobs, std::string backend, std::map<std::string, std::string> child_env,
            Clock::time_point sweep_start, std::deque<const PlannedRun*> pending, SweepOutcome& outcome,
            double progress_every)
      : spec_(spec), out_(std::move(out)), jobs_(jobs), backend_(std::move(backend)), child_env_(std::move(child_env)),
        sweep_start_(sweep_start),
        pending_(std::move(pending)), outcome_(outcome), exe_(self_executable()), to_train_(pending_.size()),
        progress_every_(progress_every), last_progress_(sweep_start) {}

  // Every progress_every seconds: a line per running run and one for the sweep (stdout and sweep.log).
  void report_progress() {
    if (progress_every_ <= 0 || running_.empty() ||
        std::chrono::duration<double>(Clock::now() - last_progress_).count() < progress_every_)
      return;
    last_progress_ = Clock::now();
    double flops_left = 0, flops_per_second = 0;
    for (const PlannedRun* run : pending_) flops_left += run->flops;
    const std::string at = str_cat("[", duration_text(elapsed()), "]");  // (not operator+: GCC 12 -Wrestrict false positive)
    for (const auto& [pid, r] : running_) {
      const PlannedRun& run = *r.run;
      const RunProgress p = latest_progress(r.paths.metrics);
      const int64_t tokens_per_step = run.tokens / std::max<int64_t>(run.steps, 1);
      const double done = p.step < 0 ? 0.0 : static_cast<double>(p.step + 1) / static_cast<double>(run.steps);
      flops_left += run.flops * (1.0 - done);
      flops_per_second += p.tokens_per_second * run.flops_per_token;
      say(str_cat(at, " run    ", run_progress_line(run.name, p, run.steps, tokens_per_step)));
    }
    say(str_cat(at, " sweep  ", finished_, "/", to_train_, " runs done, ", running_.size(), " running, ",
                pending_.size(), " waiting; ETA ", duration_text(eta_seconds(flops_left, flops_per_second)),
                " (", flops_left, " FLOPs left at ", flops_per_second, " FLOP/s)"));
  }

  bool busy() const { return !pending_.empty() || !running_.empty(); }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - sweep_start_).count(); }

  // Starts waiting runs until `jobs` children are training.
  void fill_slots() {
    while (!pending_.empty() && static_cast<int>(running_.size()) < jobs_) {
      const PlannedRun& run = *pending_.front();
      pending_.pop_front();
      launch(run);
    }
  }

  // Records the exit of one of this sweep's children (others are ignored).
  void collect(const ChildExit& exit) {
    auto it = running_.find(exit.pid);
    if (it == running_.end()) return;
    const Running done = it->second;
    running_.erase(it);
    const double seconds = std::chrono::duration<double>(Clock::now() - done.started).count();
    const RunOutcome result = judge_exit(exit, done.paths, *done.run, seconds);
    const json record = make_record(spec_, *done.run, result);
    write_json_file(done.paths.result, record);
    // The file is rewritten whole at the end; a line lost now (a full disk) is said, not silent.
    if (!append_line(out_ / "runs.jsonl", record.dump()))
      say(str_cat("tripod scale: warning: ", done.run->name, "'s record did not reach ", (out_ / "runs.jsonl").string(),
                  " (it is in ", done.paths.result.string(), "; runs.jsonl is rewritten when the sweep ends)"));
    ++finished_;
    if (result.status == RunStatus::Ok) ++outcome_.ok;
    if (result.status == RunStatus::Diverged) ++outcome_.diverged;
    if (result.status == RunStatus::Failed) {
      ++outcome_.failed;
      failures_.push_back(done.run->name + ": " + result.error);
    }
    char line[1024];
    std::snprintf(line, sizeof line, "[%6s] done   %-22s %-8s %s  %.1f s  (%zu/%zu done, %zu left)",
                  duration_text(elapsed()).c_str(), done.run->name.c_str(), run_status_name(result.status).c_str(),
                  result.status == RunStatus::Ok
                      ? ("loss " + std::to_string(record.at("loss").is_number() ? record.at("loss").get<double>() : NAN)).c_str()
                      : result.error.c_str(),
                  seconds, finished_, to_train_, to_train_ - finished_);
    say(line);
  }

  // Each checkpoint is whole: the stopped children resume from it on the next `scale run`.
  void stop_running() {
    for (auto& [pid, r] : running_) ::kill(pid, SIGTERM);
    for (auto& [pid, r] : running_) wait_child(pid);
  }

  // Throws when the sweep was interrupted or runs failed.
  void check_finished(bool interrupted) const {
    TRIPOD_CHECK(!interrupted, "sweep ", spec_.file.string(), " interrupted after ", duration_text(outcome_.seconds),
                 ": ", running_.size(), " runs stopped at their last checkpoint, ", pending_.size(),
                 " not started; rerun the same command to resume");
    if (!failures_.empty()) {
      std::string list;
      for (const std::string& f : failures_) list += "\n  " + f;
      fail("sweep ", spec_.file.string(), ": ", failures_.size(), " of ", to_train_,
           " runs failed (see runs/<name>/train.log; a rerun retries them):", list);
    }
  }

 private:
  // Prepares the run's directory and starts its trainer, resuming from its checkpoint if one survives.
  void launch(const PlannedRun& run) {
    const RunPaths paths = run_paths(out_, run.name);
    fs::create_directories(paths.dir);
    write_json_file(paths.config, run.config);
    fs::remove(paths.result);  // a failed attempt's record; this attempt writes a new one
    const int64_t resume_step = checkpoint_step(paths);
    std::vector<std::string> args = {"train", "--config", paths.config.string(), "--save", paths.ckpt.string(),
                                     "--backend", backend_};
    if (resume_step > 0) args.insert(args.end(), {"--resume", paths.ckpt.string()});
    const std::string action = resume_step > 0
                                   ? "resuming " + run.name + " from its checkpoint at step " + std::to_string(resume_step)
                                   : "starting " + run.name;
    append_line(paths.log, "=== tripod scale: " + action + " (" + std::to_string(run.steps) + " steps) ===");
    const pid_t pid = spawn_logged(exe_, args, paths.log, child_env_);
    running_.emplace(pid, Running{&run, paths, Clock::now()});
    char line[512];
    std::snprintf(line, sizeof line, "[%6s] start  %-22s N=%-9lld D=%-10lld steps=%-6lld%s  (%zu running, %zu waiting)",
                  duration_text(elapsed()).c_str(), run.name.c_str(), static_cast<long long>(run.n),
                  static_cast<long long>(run.tokens), static_cast<long long>(run.steps),
                  resume_step > 0 ? (" resuming at step " + std::to_string(resume_step)).c_str() : "",
                  running_.size(), pending_.size());
    say(line);
  }

  // A line on stdout and in OUT/sweep.log (the sweep's own log, beside each run's train.log).
  void say(const std::string& line) const {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    append_line(out_ / "sweep.log", line);
  }

  const SweepSpec& spec_;
  const fs::path out_;
  const int jobs_;
  const std::string backend_;  // each run's --backend
  const std::map<std::string, std::string> child_env_;
  const Clock::time_point sweep_start_;
  std::deque<const PlannedRun*> pending_;
  SweepOutcome& outcome_;
  const fs::path exe_;
  const std::size_t to_train_;
  const double progress_every_;
  Clock::time_point last_progress_;
  std::size_t finished_ = 0;
  std::map<pid_t, Running> running_;
  std::vector<std::string> failures_;
};

}  // namespace

SweepOutcome run_sweep(const SweepSpec& spec, const CorpusInfo& corpus, const std::vector<PlannedRun>& grid,
                       const SweepOptions& options) {
  const auto sweep_start = Clock::now();
  const fs::path out = fs::absolute(options.out_dir);
  fs::create_directories(out / "runs");
  const int cores = available_cores();
  // On a device one run at a time unless told otherwise (a run a core put every run on one GPU).
  const int jobs = options.jobs > 0 ? options.jobs : options.backend == "cpu" ? cores : 1;
  const int threads = std::max(1, cores / jobs);
  std::map<std::string, std::string> child_env = {{"OMP_NUM_THREADS", std::to_string(threads)},
                                                  {"OPENBLAS_NUM_THREADS", std::to_string(threads)}};
  check_same_corpus(spec, out, corpus, grid);
  SweepOutcome outcome;
  outcome.runs = static_cast<int>(grid.size());
  // Before sweep.json is written: a spec refused for its finished runs left sweep.json describing
  // the refused spec's grid, which `scale fit` then read beside the old runs.
  std::deque<const PlannedRun*> pending = runs_to_train(spec, grid, out, outcome.already_finished);
  write_manifest(out, spec, corpus, grid);
  std::printf("tripod scale: %d runs, %d already finished, %zu to train; %d at a time, %d thread%s each -> %s\n",
              outcome.runs, outcome.already_finished, pending.size(), jobs, threads, threads == 1 ? "" : "s", out.c_str());
  if (pending.empty()) std::printf("tripod scale: nothing to train (delete runs/<name>/result.json to redo a run)\n");
  std::fflush(stdout);

  Scheduler scheduler(spec, out, jobs, options.backend, std::move(child_env), sweep_start, std::move(pending), outcome,
                      options.progress_every);
  InterruptScope interrupt;
  while (scheduler.busy() && !interrupt.interrupted()) {
    scheduler.fill_slots();
    scheduler.report_progress();
    const ChildExit exit = poll_child_exit();
    if (exit.pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    scheduler.collect(exit);
  }

  const bool interrupted = interrupt.interrupted();
  scheduler.stop_running();
  rewrite_runs_jsonl(out, grid);
  outcome.seconds = scheduler.elapsed();
  scheduler.check_finished(interrupted);
  return outcome;
}

}  // namespace tripod::sweep
