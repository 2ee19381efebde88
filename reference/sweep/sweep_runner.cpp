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

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "process/child_process.h"
#include "sweep/run_record.h"

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
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(indent) << "\n";
    check(out.good(), "cannot write ", tmp.string());
  }
  fs::rename(tmp, path);
}

std::optional<json> read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in.good()) return std::nullopt;
  json j = json::parse(in, nullptr, false);
  return j.is_discarded() ? std::nullopt : std::optional<json>(j);
}

void append_line(const fs::path& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
}

std::string clock_text(double seconds) {
  const long s = static_cast<long>(seconds);
  char text[32];
  std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  return text;
}

bool is_final(const json& result) {
  const std::string status = result.value("status", "");
  return status == "ok" || status == "diverged";
}

// A checkpoint save that was killed between its two renames leaves only ckpt.old-<pid>: put it
// back. Staging directories of killed saves are removed.
void recover_checkpoint(const fs::path& ckpt) {
  const fs::path parent = ckpt.parent_path();
  if (!fs::exists(parent)) return;
  for (const auto& entry : fs::directory_iterator(parent)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("ckpt.old-") && !fs::exists(ckpt / "state.json") && fs::exists(entry.path() / "state.json")) {
      fs::remove_all(ckpt);
      fs::rename(entry.path(), ckpt);
    } else if (name.starts_with("ckpt.saving-") || name.starts_with("ckpt.old-")) {
      fs::remove_all(entry.path());
    }
  }
}

// Refuses to mix results of two configurations in one run directory.
void check_same_config(const SweepSpec& spec, const PlannedRun& run, const RunPaths& paths) {
  const std::optional<json> existing = read_json_file(paths.config);
  if (!existing || *existing == run.config) return;
  const bool has_results = fs::exists(paths.result) || fs::exists(paths.ckpt / "state.json");
  check(!has_results, spec.file.string(), ": run ", run.name, " in ", paths.dir.string(),
        " was trained with a different configuration (config hash ", config_hash(*existing), ", now ",
        config_hash(run.config), "): the spec changed since; delete ", paths.dir.string(),
        " to redo the run, or use another --out");
}

// The step a relaunch resumes from (0: start afresh).
int64_t checkpoint_step(const RunPaths& paths) {
  if (!fs::exists(paths.ckpt / "state.json")) return 0;
  return ckpt::read_checkpoint_state(paths.ckpt).step;
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

}  // namespace

SweepOutcome run_sweep(const SweepSpec& spec, const CorpusInfo& corpus, const std::vector<PlannedRun>& grid,
                       const SweepOptions& options) {
  const auto sweep_start = Clock::now();
  const fs::path out = fs::absolute(options.out_dir);
  fs::create_directories(out / "runs");
  const int cores = available_cores();
  const int jobs = options.jobs > 0 ? options.jobs : cores;
  const int threads = std::max(1, cores / jobs);
  const std::map<std::string, std::string> child_env = {{"OMP_NUM_THREADS", std::to_string(threads)},
                                                        {"OPENBLAS_NUM_THREADS", std::to_string(threads)}};
  json grid_json = json::array();
  for (const PlannedRun& r : grid)
    grid_json.push_back({{"name", r.name}, {"N", r.n}, {"D", r.tokens}, {"C", r.flops}, {"budget", budget_label(r.budget)}, {"steps", r.steps}});
  write_json_file(out / "sweep.json", {{"spec_file", fs::absolute(spec.file).string()}, {"spec", spec.json},
                                       {"corpus", {{"dir", corpus.dir.string()}, {"vocab", corpus.vocab},
                                                   {"train_tokens", corpus.train_tokens},
                                                   {"entropy_rate_nats", corpus.entropy_rate_nats}}},
                                       {"grid", grid_json}});

  SweepOutcome outcome;
  outcome.runs = static_cast<int>(grid.size());
  std::deque<const PlannedRun*> pending;
  for (const PlannedRun& run : grid) {
    const RunPaths paths = run_paths(out, run.name);
    check_same_config(spec, run, paths);
    const std::optional<json> result = read_json_file(paths.result);
    if (result && is_final(*result) && result->value("config_hash", "") == config_hash(run.config))
      ++outcome.already_finished;
    else
      pending.push_back(&run);
  }
  // Largest budgets first: the longest runs start early, which shortens the sweep's tail.
  std::stable_sort(pending.begin(), pending.end(), [](const PlannedRun* a, const PlannedRun* b) { return a->budget > b->budget; });
  std::printf("tripod scale: %d runs, %d already finished, %zu to train; %d at a time, %d thread%s each -> %s\n",
              outcome.runs, outcome.already_finished, pending.size(), jobs, threads, threads == 1 ? "" : "s", out.c_str());
  if (pending.empty()) std::printf("tripod scale: nothing to train (delete runs/<name>/result.json to redo a run)\n");
  std::fflush(stdout);

  const fs::path exe = self_executable();
  const std::size_t to_train = pending.size();
  std::size_t finished = 0;
  std::map<pid_t, Running> running;
  std::vector<std::string> failures;
  InterruptScope interrupt;
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - sweep_start).count(); };

  while ((!pending.empty() || !running.empty()) && !interrupt.interrupted()) {
    while (!pending.empty() && static_cast<int>(running.size()) < jobs) {
      const PlannedRun& run = *pending.front();
      pending.pop_front();
      const RunPaths paths = run_paths(out, run.name);
      fs::create_directories(paths.dir);
      write_json_file(paths.config, run.config);
      fs::remove(paths.result);  // a failed attempt's record; this attempt writes a new one
      recover_checkpoint(paths.ckpt);
      const int64_t resume_step = checkpoint_step(paths);
      std::vector<std::string> args = {"train", "--config", paths.config.string(), "--save", paths.ckpt.string()};
      if (resume_step > 0) args.insert(args.end(), {"--resume", paths.ckpt.string()});
      append_line(paths.log, "=== tripod scale: " + (resume_step > 0 ? "resuming " + run.name + " from its checkpoint at step " +
                             std::to_string(resume_step) : "starting " + run.name) + " (" + std::to_string(run.steps) + " steps) ===");
      const pid_t pid = spawn_logged(exe, args, paths.log, child_env);
      running.emplace(pid, Running{&run, paths, Clock::now()});
      std::printf("[%6s] start  %-22s N=%-9lld D=%-10lld steps=%-6lld%s  (%zu running, %zu waiting)\n",
                  clock_text(elapsed()).c_str(), run.name.c_str(), static_cast<long long>(run.n),
                  static_cast<long long>(run.tokens), static_cast<long long>(run.steps),
                  resume_step > 0 ? (" resuming at step " + std::to_string(resume_step)).c_str() : "", running.size(),
                  pending.size());
      std::fflush(stdout);
    }
    const ChildExit exit = poll_child_exit();
    if (exit.pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    auto it = running.find(exit.pid);
    if (it == running.end()) continue;
    const Running done = it->second;
    running.erase(it);
    const double seconds = std::chrono::duration<double>(Clock::now() - done.started).count();
    const RunOutcome result = judge_exit(exit, done.paths, *done.run, seconds);
    const json record = make_record(spec, *done.run, result);
    write_json_file(done.paths.result, record);
    append_line(out / "runs.jsonl", record.dump());
    ++finished;
    if (result.status == RunStatus::Ok) ++outcome.ok;
    if (result.status == RunStatus::Diverged) ++outcome.diverged;
    if (result.status == RunStatus::Failed) {
      ++outcome.failed;
      failures.push_back(done.run->name + ": " + result.error);
    }
    std::printf("[%6s] done   %-22s %-8s %s  %.1f s  (%zu/%zu done, %zu left)\n", clock_text(elapsed()).c_str(),
                done.run->name.c_str(), run_status_name(result.status).c_str(),
                result.status == RunStatus::Ok ? ("loss " + std::to_string(record.at("loss").is_number() ? record.at("loss").get<double>() : NAN)).c_str()
                                               : result.error.c_str(),
                seconds, finished, to_train, to_train - finished);
    std::fflush(stdout);
  }

  const bool interrupted = interrupt.interrupted();
  for (auto& [pid, r] : running) ::kill(pid, SIGTERM);  // each checkpoint is whole: they resume from it
  for (auto& [pid, r] : running) wait_child(pid);

  // runs.jsonl in grid order, one record per run with a result (redone runs appear once).
  const fs::path jsonl = out / "runs.jsonl", tmp = out / "runs.jsonl.tmp";
  {
    std::ofstream rewrite(tmp);
    for (const PlannedRun& run : grid)
      if (const auto result = read_json_file(run_paths(out, run.name).result)) rewrite << result->dump() << "\n";
  }
  fs::rename(tmp, jsonl);
  outcome.seconds = elapsed();

  check(!interrupted, "sweep ", spec.file.string(), " interrupted after ", clock_text(outcome.seconds), ": ",
        running.size(), " runs stopped at their last checkpoint, ", pending.size(),
        " not started; rerun the same command to resume");
  if (!failures.empty()) {
    std::string list;
    for (const std::string& f : failures) list += "\n  " + f;
    fail("sweep ", spec.file.string(), ": ", failures.size(), " of ", to_train,
         " runs failed (see runs/<name>/train.log; a rerun retries them):", list);
  }
  return outcome;
}

}  // namespace tripod::sweep
