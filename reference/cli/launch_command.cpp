// tripod launch [--max-restarts N] [--progress-timeout S] [--kill-grace S] [--restart-delay S]
//               [--checkpoints ROOT] [--events FILE] -- LAUNCHER COMMAND LINE...
// Runs the command (mpirun ..., srun ...) and runs it again when it fails: process/supervisor.h.
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_root.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "process/supervisor.h"

namespace tripod::cli {
namespace {

struct LaunchCommandOptions {
  process::SupervisorOptions supervisor;
  std::string events;
};

template <typename T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// One JSON object per line, for scripts: {"event": "failure" | "restart" | "finish", ...}, after
// the launch's {"event": "start", ...}.
nlohmann::json event_json(const process::LaunchEvent& e) {
  using Kind = process::LaunchEvent::Kind;
  switch (e.kind) {
    case Kind::failure:
      return {{"event", "failure"},
              {"attempt", e.attempt},
              {"cause", e.cause},
              {"what", e.what},
              {"exit_code", e.exit_code},
              {"signal", or_null(e.signal)},
              {"error", e.error_line.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.error_line)},
              {"last_step", or_null(e.last_step)},
              {"checkpoint_step", or_null(e.checkpoint_step)},
              {"steps_to_recompute", or_null(e.steps_to_recompute)},
              {"attempt_seconds", e.attempt_seconds},
              {"lost_seconds", or_null(e.lost_seconds)}};
    case Kind::restart:
      return {{"event", "restart"},         {"attempt", e.attempt},
              {"restart", e.restart},       {"max_restarts", e.max_restarts},
              {"resume_step", or_null(e.checkpoint_step)}, {"delay_seconds", e.delay_seconds}};
    case Kind::finish:
      return {{"event", "finish"},
              {"status", e.status},
              {"exit_code", e.exit_code},
              {"attempts", e.attempts},
              {"restarts", e.restarts},
              {"max_restarts", e.max_restarts},
              {"wall_seconds", e.wall_seconds},
              {"lost_seconds", or_null(e.total_lost_seconds)}};
  }
  return {};
}

void run_launch_command(const LaunchCommandOptions& o) {
  const std::filesystem::path& checkpoints = o.supervisor.checkpoints;
  // A file here was read as "no checkpoint (step 0)".
  TRIPOD_CHECK(
      checkpoints.empty() || !std::filesystem::exists(checkpoints) || std::filesystem::is_directory(checkpoints),
      "--checkpoints ", checkpoints.string(), " is a file, not a checkpoint root");
  // Appended to, as train.metrics is on resume: a launch run again after the supervisor itself
  // died (a rebooted login node) truncated the history of the attempts before it. Each launch
  // starts with a "start" line, so a script can tell them apart.
  std::ofstream events;
  if (!o.events.empty()) {
    events.open(o.events, std::ios::app);
    check(events.good(), "--events: cannot write ", o.events, ": ", std::strerror(errno));
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    events << nlohmann::json{{"event", "start"},
                             {"command", o.supervisor.command},
                             {"max_restarts", o.supervisor.max_restarts},
                             {"unix_time", std::chrono::duration<double>(now).count()}}
                  .dump()
           << std::endl;
    check(events.good(), "--events: cannot write ", o.events, ": ", std::strerror(errno));
  }
  const int code = process::supervise(o.supervisor, [&](const process::LaunchEvent& e) {
    if (events.is_open()) events << event_json(e).dump() << std::endl;  // flushed: a script may follow it
  });
  // The job's exit code, reported already: CLI11 returns it from main() without printing anything.
  if (code != 0) throw CLI::RuntimeError(code);
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto o = std::make_shared<LaunchCommandOptions>();
  process::SupervisorOptions& s = o->supervisor;
  // Where `tripod train --resume auto` resumes: the newest complete checkpoint when `latest`
  // cannot be followed (ROOT/latest read literally reported "checkpoint unknown" then).
  s.resume_step = [](const std::filesystem::path& root) -> std::optional<int64_t> {
    const auto dir = ckpt::find_latest(root);
    return dir ? ckpt::checkpoint_step(*dir) : 0;
  };
  s.resume_problem = [](const std::filesystem::path& root) { return ckpt::latest_pointer_problem(root); };
  auto* cmd = app.add_subcommand(
      "launch",
      "run a training job's launcher command line (mpirun, srun, ...) and restart it from its latest checkpoint "
      "when it fails: a non-zero exit, a signal, or no output for --progress-timeout seconds");
  cmd->add_option("--max-restarts", s.max_restarts, "restarts after the first attempt before giving up")
      ->capture_default_str();
  require_non_negative(cmd->add_option("--progress-timeout", s.progress_timeout_s,
                  "seconds without any output after which the job is taken to be stuck and stopped (SIGTERM, "
                  "SIGKILL after --kill-grace) and restarted; 0: never. Set it to several times the longest gap "
                  "between the job's lines (train.log_every steps, an evaluation, a checkpoint save, start-up)")
      ->capture_default_str());
  require_non_negative(cmd->add_option("--kill-grace", s.kill_grace_s,
                  "seconds between SIGTERM and SIGKILL (tripod train answers SIGTERM by finishing its step and "
                  "saving a checkpoint)")
      ->capture_default_str());
  require_non_negative(
      cmd->add_option("--restart-delay", s.restart_delay_s, "seconds between a failure and the restart")
          ->capture_default_str());
  cmd->add_option("--checkpoints", s.checkpoints,
                  "checkpoint root whose `latest` says where a restart resumes (default: the command's --save DIR); "
                  "used for the report only: the command must resume by itself (tripod train --resume auto)");
  cmd->add_option("--events", o->events,
                  "append this launch's start, each failure and restart, and the finish to this file, one JSON "
                  "object per line");
  cmd->add_option("command", s.command, "the job's command line, after `--`");
  cmd->footer(
      "Example: tripod launch --max-restarts 3 --progress-timeout 600 -- mpirun -np 8 tripod train --config small "
      "--save runs/ckpt --resume auto --set train.save_every=100\n"
      "Each failure is reported on stderr: the attempt, what failed (exit status or signal, and the job's last "
      "`tripod: error:` line), the last step it reported (\"step N/TOTAL\" lines), the checkpoint step the restart "
      "resumes from (ROOT/latest), the steps to recompute (last step - checkpoint step) and the wall time lost "
      "(from the line that showed the checkpoint's step to the failure; the whole attempt when it never showed it).\n"
      "Exit code: 0 when the job succeeds; else the last attempt's (128 + signal for a signal), never 0. "
      "SIGINT/SIGTERM (and SIGHUP, unless ignored by nohup) are forwarded to the job's process group as SIGTERM and end the supervision.");
  cmd->callback([o] {
    check(!o->supervisor.command.empty(),
          "no command to run: give the job's command line after `--`, e.g. "
          "tripod launch --max-restarts 3 -- mpirun -np 2 tripod train --save runs/ckpt --resume auto");
    run_launch_command(*o);
  });
}

}  // namespace tripod::cli
