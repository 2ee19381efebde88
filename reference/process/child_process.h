// Child processes of the sweep driver: each run is this same binary (`/proc/self/exe train ...`)
// with its output appended to the run's log, its thread count pinned through the environment, and
// a parent-death signal so that killing the driver never leaves orphaned runs fighting for cores.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tripod::process {

// The path of the running executable (/proc/self/exe resolved).
std::filesystem::path self_executable();

// Starts `executable args...` with stdout and stderr appended to `log`, stdin from /dev/null and
// `env` overriding the inherited environment. Returns the child's pid.
pid_t spawn_logged(const std::filesystem::path& executable, const std::vector<std::string>& args,
                   const std::filesystem::path& log, const std::map<std::string, std::string>& env);

struct ChildExit {
  pid_t pid = 0;         // 0: no child has exited yet
  bool signaled = false;
  int code = 0;          // exit status, or the signal number when signaled
};

// Reaps one exited child without blocking (pid 0 when none has exited).
ChildExit poll_child_exit();
// Blocks until `pid` exits.
ChildExit wait_child(pid_t pid);

// Runs `executable args...` in the foreground (sharing this process's stdout and stderr) and
// waits for it.
ChildExit run_foreground(const std::filesystem::path& executable, const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env = {});

// "exit status 1", "killed by signal 9 (Killed)".
std::string describe_exit(const ChildExit& exit);

// SIGINT/SIGTERM, and SIGHUP unless it is ignored (nohup), set a flag instead of killing the
// driver, so it can stop its children and leave every run resumable. The scope restores the
// previous handlers.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  bool interrupted() const;
  int interrupts() const;  // how many signals came (a second one asks for haste)
};

}  // namespace tripod::process
