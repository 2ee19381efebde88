#include "process/supervisor.h"

#include <sys/prctl.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "process/child_process.h"
#include "process/progress_watch.h"
#include "process/watched_child.h"

namespace tripod::process {
namespace fs = std::filesystem;
using Clock = WatchedChild::Clock;

namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

void report(const std::string& text) { std::fprintf(stderr, "tripod launch: %s\n", text.c_str()); }

std::string seconds_text(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f s", s);
  return buffer;
}

// The command line as a shell would take it back: words with spaces or quotes single-quoted.
std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) {
    if (!text.empty()) text += ' ';
    if (!w.empty() && w.find_first_of(" \t\n'\"\\$`;&|<>()*?[]{}~#!") == std::string::npos) {
      text += w;
      continue;
    }
    text += '\'';
    for (char c : w) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
    text += '\'';
  }
  return text;
}

// A closed stdout or stderr (`tripod launch ... | head`, a dead `tee` or ssh session) killed the
// supervisor by SIGPIPE at its next write of the job's output, with no report and no restart; the
// write fails instead (WatchedChild stops passing that stream through) and supervision goes on.
class IgnoreBrokenPipes {
 public:
  IgnoreBrokenPipes() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &previous_);
  }
  ~IgnoreBrokenPipes() { ::sigaction(SIGPIPE, &previous_, nullptr); }
  IgnoreBrokenPipes(const IgnoreBrokenPipes&) = delete;
  IgnoreBrokenPipes& operator=(const IgnoreBrokenPipes&) = delete;

 private:
  struct sigaction previous_ {};
};

// Orphaned processes of the job (a rank whose launcher died, a wrapper script's children) are
// re-parented to the supervisor rather than to init while it runs, so that it can reap them and
// tell a group with live processes from one holding only the dead (WatchedChild::group_alive).
class SubreaperScope {
 public:
  SubreaperScope() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~SubreaperScope() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  SubreaperScope(const SubreaperScope&) = delete;
  SubreaperScope& operator=(const SubreaperScope&) = delete;
};

// The value of `--save DIR` or `--save=DIR` in the command, where it has one.
fs::path save_dir_of(const std::vector<std::string>& command) {
  for (std::size_t i = 0; i < command.size(); ++i) {
    if (command[i] == "--save" && i + 1 < command.size()) return command[i + 1];
    if (command[i].starts_with("--save=")) return command[i].substr(7);
  }
  return {};
}

struct AttemptEnd {
  ChildExit exit;
  bool stuck = false, interrupted = false, killed_by_us = false;
  Clock::time_point ended;
};

// Runs one attempt to its end: watching for progress, forwarding an interruption, and making
// sure no process of a failed attempt outlives it (a leftover rank would hold its GPU and ports).
AttemptEnd run_attempt(const fs::path& executable, const SupervisorOptions& o, int attempt, ProgressWatch& watch,
                       const InterruptScope& interrupts) {
  WatchedChild child(executable, o.command,
                     [&watch](OutputStream s, std::string_view line) { watch.on_line(s, line); });
  AttemptEnd end;
  std::optional<Clock::time_point> term_sent;
  bool kill_sent = false, group_termed = false;
  const auto kill_all = [&] {
    child.signal_group(SIGKILL);
    child.signal_strays(SIGKILL);
    kill_sent = true;
  };
  // The job's processes outside its group first (mpirun's ranks): mpirun, sent SIGTERM, forwards
  // it and kills its ranks about a second later, before they could finish a step and save, so the
  // group (mpirun) follows once they are gone. A job all in its group gets SIGTERM at once.
  const auto terminate = [&] {
    if (term_sent) return;
    term_sent = Clock::now();
    if (child.signal_strays(SIGTERM) == 0) {
      child.signal_group(SIGTERM);
      group_termed = true;
    }
  };
  while (!child.exited()) {
    const Clock::time_point now = Clock::now();
    if (interrupts.interrupted() && !end.interrupted) {
      end.interrupted = true;
      report("interrupted: sending SIGTERM to attempt " + std::to_string(attempt) + " (process group " +
             std::to_string(child.pid()) + " and its processes outside it); no restart will follow" +
             " (interrupt again to send SIGKILL at once)");
      terminate();
    } else if (end.interrupted && !kill_sent && interrupts.interrupts() > 1) {
      report("interrupted again: sending SIGKILL to attempt " + std::to_string(attempt));
      kill_all();
    }
    if (term_sent && !group_termed && !kill_sent && child.signal_strays(0) == 0) {
      child.signal_group(SIGTERM);
      group_termed = true;
    }
    if (o.progress_timeout_s > 0 && !term_sent && seconds_between(child.last_output(), now) > o.progress_timeout_s) {
      end.stuck = true;
      report("attempt " + std::to_string(attempt) + " made no progress: no output for " +
             seconds_text(o.progress_timeout_s) + " (--progress-timeout); sending SIGTERM to its processes" +
             ", SIGKILL in " + seconds_text(o.kill_grace_s));
      terminate();
    }
    if (term_sent && !kill_sent && seconds_between(*term_sent, now) > o.kill_grace_s) {
      report("attempt " + std::to_string(attempt) + " still running " + seconds_text(o.kill_grace_s) +
             " after SIGTERM: sending SIGKILL");
      kill_all();
    }
    child.pump(0.1);  // short, so that flags set by signals and the deadlines are seen soon
  }
  end.killed_by_us = term_sent.has_value();
  // Its remaining output, then the exit. A process that outlived the command and still holds the
  // pipes gets a second to finish writing.
  const Clock::time_point exited = Clock::now();
  while (child.output_open() && seconds_between(exited, Clock::now()) < 1.0) child.pump(0.1);
  end.exit = child.reap();
  const bool failed = end.exit.signaled || end.exit.code != 0 || end.stuck || end.interrupted;
  // Its ranks too: a killed mpirun left them training, holding the checkpoint root's lock, so the
  // next attempt was refused ("another run is saving into this checkpoint root", the pid a rank's).
  if (failed && child.job_alive()) {
    report("processes of attempt " + std::to_string(attempt) + " outlived its command: sending SIGTERM to them");
    child.signal_strays(SIGTERM);
    child.signal_group(SIGTERM);
    const Clock::time_point sent = Clock::now();
    while (child.job_alive() && seconds_between(sent, Clock::now()) < o.kill_grace_s) child.pump(0.05);
    if (child.job_alive()) {
      child.signal_strays(SIGKILL);
      child.signal_group(SIGKILL);
    }
    while (child.output_open() && seconds_between(sent, Clock::now()) < o.kill_grace_s + 1.0) child.pump(0.1);
    while (child.job_alive() && seconds_between(sent, Clock::now()) < o.kill_grace_s + 2.0) child.pump(0.05);
  }
  end.ended = Clock::now();
  return end;
}

int shell_exit_code(const ChildExit& exit) { return exit.signaled ? 128 + exit.code : exit.code; }

LaunchEvent failure_event(int attempt, const AttemptEnd& end, const ProgressWatch& watch, const fs::path& checkpoints,
                          Clock::time_point started, const SupervisorOptions& o) {
  LaunchEvent e;
  e.kind = LaunchEvent::Kind::failure;
  e.attempt = attempt;
  e.cause = end.interrupted ? "interrupted" : end.stuck ? "progress_timeout" : end.exit.signaled ? "signal" : "exit";
  e.what = end.killed_by_us && end.exit.signaled
               ? "killed by signal " + std::to_string(end.exit.code) + " (" + strsignal(end.exit.code) +
                     ") sent by tripod launch"
               : describe_exit(end.exit);
  if (end.stuck) e.what = "no output for " + seconds_text(o.progress_timeout_s) + " (--progress-timeout), then " + e.what;
  if (end.interrupted) e.what = "interrupted, then " + e.what;
  e.exit_code = shell_exit_code(end.exit);
  if (end.exit.signaled) e.signal = end.exit.code;
  e.error_line = watch.error_line();
  e.last_step = watch.last_step();
  e.attempt_seconds = seconds_between(started, end.ended);
  if (!checkpoints.empty()) {
    e.checkpoint_step = watch.resume_step();
    if (!e.checkpoint_step)
      report("warning: " + (checkpoints / "latest").string() + " does not name a step directory (step-NNNNNNNN)");
    if (o.resume_problem)
      if (const std::string problem = o.resume_problem(checkpoints); !problem.empty()) report("warning: " + problem);
  }
  if (e.checkpoint_step) {
    e.steps_to_recompute = std::max<int64_t>(0, watch.last_step().value_or(0) - *e.checkpoint_step);
    const std::optional<Clock::time_point> reached = watch.reached(*e.checkpoint_step);
    e.lost_seconds = seconds_between(reached.value_or(started), end.ended);
  }
  return e;
}

void report_failure(const LaunchEvent& e) {
  report("attempt " + std::to_string(e.attempt) + " failed after " + seconds_text(e.attempt_seconds) + ": " + e.what);
  if (!e.error_line.empty()) report("  its last error: " + e.error_line);
  std::string cost = "  last step reported: " + (e.last_step ? std::to_string(*e.last_step) : std::string("none"));
  if (e.checkpoint_step) {
    cost += "; checkpoint: " + (*e.checkpoint_step ? "step " + std::to_string(*e.checkpoint_step) : std::string("none (step 0)"));
    cost += "; " + std::to_string(*e.steps_to_recompute) + (*e.steps_to_recompute == 1 ? " step" : " steps") +
            " to recompute; " + seconds_text(*e.lost_seconds) +
            " of wall time lost";
  } else {
    cost += "; checkpoint unknown (no --checkpoints, and the command has no --save): cost not known";
  }
  report(cost);
}

// Sleeps `seconds`, returning early (false) when interrupted.
bool interruptible_sleep(double seconds, const InterruptScope& interrupts) {
  // Past about 9.2e9 s the deadline overflowed the clock and the sleep ended at once, after
  // saying it would wait; 1e9 s (31 years) is as good as forever.
  seconds = std::min(seconds, 1e9);
  const Clock::time_point until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(seconds));
  while (Clock::now() < until) {
    if (interrupts.interrupted()) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(50), until - Clock::now()));
  }
  return !interrupts.interrupted();
}

}  // namespace

int supervise(const SupervisorOptions& o, const std::function<void(const LaunchEvent&)>& on_event) {
  check(!o.command.empty(), "no command to launch: give it after `--`, e.g. tripod launch -- mpirun -np 2 tripod train ...");
  check(o.max_restarts >= 0, "--max-restarts must be 0 or more, not ", o.max_restarts);
  check(o.progress_timeout_s >= 0 && o.kill_grace_s >= 0 && o.restart_delay_s >= 0,
        "--progress-timeout, --kill-grace and --restart-delay must be 0 or more seconds");
  const fs::path executable = find_executable(o.command[0]);
  const fs::path checkpoints = o.checkpoints.empty() ? save_dir_of(o.command) : o.checkpoints;
  const auto emit = [&](const LaunchEvent& e) {
    if (on_event) on_event(e);
  };

  const InterruptScope interrupts;
  const SubreaperScope subreaper;
  const IgnoreBrokenPipes broken_pipes;
  const Clock::time_point began = Clock::now();
  double total_lost = 0;
  bool lost_known = true;
  int attempt = 0, exit_code = 0;
  std::string status = "failed";
  std::optional<int64_t> diverged_before;  // the step the previous attempt diverged at, if it did
  std::optional<std::string> early_error_before;  // its error, if it failed before any step
  for (;;) {
    ++attempt;
    report("attempt " + std::to_string(attempt) + " of at most " + std::to_string(int64_t{o.max_restarts} + 1) + ": " +
           joined(o.command));
    std::fflush(stdout);
    ProgressWatch watch(checkpoints, o.resume_step);
    const Clock::time_point started = Clock::now();
    const AttemptEnd end = run_attempt(executable, o, attempt, watch, interrupts);
    if (!end.exit.signaled && end.exit.code == 0 && !end.stuck && !end.interrupted) {
      status = "succeeded";
      exit_code = 0;
      break;
    }
    const LaunchEvent failure = failure_event(attempt, end, watch, checkpoints, started, o);
    report_failure(failure);
    emit(failure);
    exit_code = failure.exit_code != 0 ? failure.exit_code : 1;
    if (failure.lost_seconds) total_lost += *failure.lost_seconds;
    else lost_known = false;
    if (end.interrupted || interrupts.interrupted()) {
      status = "interrupted";
      break;
    }
    // A resumed run replays its batches bit for bit: a divergence at the same step twice is the
    // run's own, not a fault of the machine (a NaN from a flaky GPU does not come back at the same
    // step), and every further restart would end there too.
    const std::optional<int64_t> diverged = watch.diverged_at();
    if (diverged && diverged == diverged_before) {
      report("attempt " + std::to_string(attempt) + " diverged at step " + std::to_string(*diverged) +
             " as attempt " + std::to_string(attempt - 1) +
             " did: a resumed run replays its batches bit for bit, so a restart would too; not restarting "
             "(change the learning rate, anomaly.policy or the data, and launch again)");
      status = "diverged";
      break;
    }
    diverged_before = diverged;
    // The same error twice with no step trained (a bad --set, a root another job holds, a script
    // that cannot be executed): the command's own fault, which every restart would repeat.
    const std::optional<std::string> early_error =
        !watch.last_step() && !failure.error_line.empty() ? std::optional(failure.error_line) : std::nullopt;
    if (early_error && early_error == early_error_before) {
      report("attempt " + std::to_string(attempt) + " failed before any step with the same error as attempt " +
             std::to_string(attempt - 1) + ": a restart would too; not restarting (fix the command and launch again)");
      break;
    }
    early_error_before = early_error;
    if (attempt > o.max_restarts) break;

    LaunchEvent restart;
    restart.kind = LaunchEvent::Kind::restart;
    restart.attempt = attempt + 1;
    restart.restart = attempt;
    restart.max_restarts = o.max_restarts;
    restart.checkpoint_step = failure.checkpoint_step;
    restart.delay_seconds = o.restart_delay_s;
    report("restart " + std::to_string(attempt) + " of " + std::to_string(o.max_restarts) + " in " +
           seconds_text(o.restart_delay_s) + ": attempt " + std::to_string(attempt + 1) + " resumes from " +
           (failure.checkpoint_step ? "checkpoint step " + std::to_string(*failure.checkpoint_step)
                                    : std::string("wherever the command resumes (checkpoint unknown)")));
    emit(restart);
    if (!interruptible_sleep(o.restart_delay_s, interrupts)) {
      report("interrupted while waiting to restart: no restart");
      status = "interrupted";
      break;
    }
  }

  LaunchEvent finish;
  finish.kind = LaunchEvent::Kind::finish;
  finish.attempt = attempt;
  finish.status = status;
  finish.exit_code = exit_code;
  finish.attempts = attempt;
  finish.restarts = attempt - 1;
  finish.max_restarts = o.max_restarts;
  finish.wall_seconds = seconds_between(began, Clock::now());
  if (lost_known) finish.total_lost_seconds = total_lost;
  std::string summary = status + (exit_code != 0 ? " (exit code " + std::to_string(exit_code) + ")" : "") + ": " +
                        std::to_string(finish.attempts) + " attempt" + (finish.attempts == 1 ? "" : "s") + ", " +
                        std::to_string(finish.restarts) + " restart" + (finish.restarts == 1 ? "" : "s");
  if (status == "failed" && attempt > o.max_restarts)
    summary += " (--max-restarts " + std::to_string(o.max_restarts) + " used up)";
  summary += "; wall time " + seconds_text(finish.wall_seconds) + ", time lost to failures " +
             (finish.total_lost_seconds ? seconds_text(*finish.total_lost_seconds) : std::string("unknown"));
  report(summary);
  emit(finish);
  return exit_code;
}

}  // namespace tripod::process
