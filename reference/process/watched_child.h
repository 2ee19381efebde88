// A command run in a process group of its own, for `tripod launch` (process/supervisor.h): its
// stdout and stderr are passed through to ours byte for byte as they arrive and, on the way, cut
// into lines for the supervisor to read (progress, errors). The group lets one signal reach the
// processes the command started (srun, a wrapper script and its trainer); those that leave it
// (mpirun's local ranks) are found below the supervisor in /proc (signal_strays).
#pragma once
#include <sys/types.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "process/child_process.h"

namespace tripod::process {

enum class OutputStream { out, err };
using OutputLineHandler = std::function<void(OutputStream, std::string_view line)>;

// `executable` found on PATH as execvp would (a name with a '/' is taken as a path); throws
// tripod::Error naming the command when there is no such executable.
std::filesystem::path find_executable(const std::string& command);

class WatchedChild {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts `argv` (argv[0] is shown to the program as its name) from `executable`, with stdin from
  // /dev/null (a job in a background process group must not read the terminal) and SIGTERM on the
  // supervisor's death, so that killing it never leaves a job training.
  WatchedChild(const std::filesystem::path& executable, const std::vector<std::string>& argv,
               OutputLineHandler on_line);
  // Ends (SIGKILL) and reaps a child still running: only reached when the supervisor itself fails.
  ~WatchedChild();
  WatchedChild(const WatchedChild&) = delete;
  WatchedChild& operator=(const WatchedChild&) = delete;

  pid_t pid() const { return pid_; }
  // Waits up to `seconds` for output, passes through what came and hands complete lines to the
  // handler; returns at the first output (or at once when both streams are closed).
  void pump(double seconds);
  // When the child last wrote anything (its start time until it does).
  Clock::time_point last_output() const { return last_output_; }
  bool output_open() const { return fds_[0] >= 0 || fds_[1] >= 0; }

  // The command's own exit, once it has exited, without reaping it: while it is a zombie its pid,
  // and so its group id, cannot be reused, so signal_group() still reaches only its processes.
  std::optional<ChildExit> exited();
  // Reaps the exited command (call after exited() said so); later group signals reach its other
  // processes while any is left.
  ChildExit reap();
  void signal_group(int signal) const;
  // Whether any process is still in the group (the command's zombie counts until reaped).
  bool group_alive();
  // The job's live processes outside its group: those it started in groups of their own (Open
  // MPI 4's mpirun puts each local rank in one) and orphans re-parented to the supervisor. A
  // signal to the group never reached them. Returns how many were sent `signal`.
  int signal_strays(int signal);
  // group_alive(), or a stray still running.
  bool job_alive();

 private:
  void read_stream(int index);
  void close_stream(int index);
  void reap_orphans();

  pid_t pid_ = 0;
  bool reaped_ = false;
  std::optional<ChildExit> exit_;
  std::array<int, 2> fds_{-1, -1};           // read ends of the child's stdout and stderr
  std::array<std::string, 2> partial_lines_;  // a line not yet ended by '\n', per stream
  OutputLineHandler on_line_;
  Clock::time_point last_output_;
};

}  // namespace tripod::process
