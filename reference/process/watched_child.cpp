#include "process/watched_child.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "process/process_tree.h"

namespace tripod::process {
namespace fs = std::filesystem;
namespace {

bool is_executable_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own output is gone: the child's output has nowhere to go either
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// A line longer than this is handed on in pieces (only the watch reads it so; the pass-through
// is byte for byte), so a child writing without newlines cannot grow the buffer without bound.
constexpr std::size_t kMaxLine = 64 * 1024;

}  // namespace

fs::path find_executable(const std::string& command) {
  check(!command.empty(), "the command to launch is empty");
  if (command.find('/') != std::string::npos) {
    check(is_executable_file(command), "cannot run '", command, "': not an executable file");
    return command;
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = path.substr(begin, end - begin);
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / command;  // an empty entry is "."
    if (is_executable_file(candidate)) return candidate;
    begin = end + 1;
  }
  fail("cannot run '", command, "': no such executable on PATH");
}

WatchedChild::WatchedChild(const fs::path& executable, const std::vector<std::string>& argv,
                           OutputLineHandler on_line)
    : on_line_(std::move(on_line)), last_output_(Clock::now()) {
  // Everything the child needs is built before fork: after fork only async-signal-safe calls.
  std::vector<std::string> argv_text = argv;
  std::vector<char*> argv_pointers;
  for (std::string& a : argv_text) argv_pointers.push_back(a.data());
  argv_pointers.push_back(nullptr);
  const std::string exe = executable.string();
  // What the child says when exec fails, made before fork (only write() after it): the command
  // and why, as a "tripod: error:" line, which the supervisor reports as the attempt's last error.
  const std::string cannot = "tripod: error: tripod launch cannot execute " + exe + ": ";
  const std::string because_no_format = cannot + "not a program the system can run (a script needs a #! line)\n";
  const std::string because_missing = cannot + "it, or the interpreter its #! line names, does not exist\n";
  const std::string because_denied = cannot + "permission denied\n";
  const std::string because_other = cannot + "exec failed\n";

  int out_pipe[2], err_pipe[2];
  check(::pipe2(out_pipe, O_CLOEXEC) == 0, "cannot make a pipe for the command's output: ", std::strerror(errno));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    fail("cannot make a pipe for the command's output: ", std::strerror(e));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::signal(SIGPIPE, SIG_DFL);  // the supervisor ignores it; an ignored signal stays so across exec
    ::execv(exe.c_str(), argv_pointers.data());
    const int e = errno;
    const std::string& message = e == ENOEXEC ? because_no_format
                                 : e == ENOENT ? because_missing
                                 : e == EACCES ? because_denied
                                               : because_other;
    (void)!::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    fail("cannot start '", exe, "': ", std::strerror(fork_errno));
  }
  // Also here, so that a signal sent before the child has run setpgid reaches it.
  ::setpgid(pid, pid);
  pid_ = pid;
  fds_ = {out_pipe[0], err_pipe[0]};
}

WatchedChild::~WatchedChild() {
  for (int i = 0; i < 2; ++i) close_stream(i);
  if (pid_ > 0 && !reaped_) {
    signal_group(SIGKILL);
    wait_child(pid_);
  }
}

void WatchedChild::close_stream(int index) {
  if (fds_[index] < 0) return;
  ::close(fds_[index]);
  fds_[index] = -1;
  if (!partial_lines_[index].empty() && on_line_)
    on_line_(static_cast<OutputStream>(index), partial_lines_[index]);  // a last line without '\n'
  partial_lines_[index].clear();
}

void WatchedChild::read_stream(int index) {
  char buffer[16384];
  ssize_t n;
  do n = ::read(fds_[index], buffer, sizeof buffer);
  while (n < 0 && errno == EINTR);
  if (n <= 0) {  // end of output (or an error, which ends it too)
    close_stream(index);
    return;
  }
  last_output_ = Clock::now();
  write_all(index == 0 ? STDOUT_FILENO : STDERR_FILENO, buffer, static_cast<std::size_t>(n));
  std::string& line = partial_lines_[index];
  for (ssize_t i = 0; i < n; ++i) {
    if (buffer[i] != '\n') {
      line.push_back(buffer[i]);
      if (line.size() < kMaxLine) continue;
    }
    if (on_line_) on_line_(static_cast<OutputStream>(index), line);
    line.clear();
  }
}

void WatchedChild::pump(double seconds) {
  std::array<pollfd, 2> polled{};
  nfds_t count = 0;
  std::array<int, 2> index_of{};
  for (int i = 0; i < 2; ++i)
    if (fds_[i] >= 0) {
      polled[count] = {fds_[i], POLLIN, 0};
      index_of[count++] = i;
    }
  const int timeout_ms = seconds > 0 ? static_cast<int>(seconds * 1000 + 0.5) : 0;
  if (count == 0) {  // nothing left to read: just let the time pass
    if (timeout_ms > 0) ::poll(nullptr, 0, timeout_ms);
    return;
  }
  const int ready = ::poll(polled.data(), count, timeout_ms);
  if (ready <= 0) return;  // timeout, or a signal (the caller looks at its flags and calls again)
  for (nfds_t k = 0; k < count; ++k)
    if (polled[k].revents & (POLLIN | POLLHUP | POLLERR)) read_stream(index_of[k]);
}

void WatchedChild::reap_orphans() {
  // The command's orphaned descendants are this process's children (supervise() makes it their
  // subreaper). Each exited one is reaped here, so that a dead process no longer counts as a
  // member of the group; the command itself is only looked at (exited()) until reap().
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (info.si_pid == pid_ && !reaped_) return;
    ::waitpid(info.si_pid, nullptr, 0);
  }
}

std::optional<ChildExit> WatchedChild::exited() {
  reap_orphans();
  if (exit_) return exit_;
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0)
    return std::nullopt;
  ChildExit e;
  e.pid = pid_;
  e.signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  e.code = info.si_status;
  exit_ = e;
  return exit_;
}

ChildExit WatchedChild::reap() {
  if (!reaped_) {
    const ChildExit e = wait_child(pid_);
    if (!exit_) exit_ = e;
    reaped_ = true;
  }
  return *exit_;
}

void WatchedChild::signal_group(int signal) const {
  if (pid_ > 0) ::kill(-pid_, signal);
}

bool WatchedChild::group_alive() {
  reap_orphans();
  return pid_ > 0 && ::kill(-pid_, 0) == 0;
}

int WatchedChild::signal_strays(int signal) {
  reap_orphans();
  int sent = 0;
  // Below the supervisor, not only below the command: a process whose parent died was re-parented
  // to the supervisor (its subreaper). The supervisor starts nothing else.
  for (const pid_t p : live_descendants(::getpid()))
    if (p != pid_ && process_group(p) != pid_ && ::kill(p, signal) == 0) ++sent;
  return sent;
}

bool WatchedChild::job_alive() {
  if (group_alive()) return true;
  for (const pid_t p : live_descendants(::getpid()))
    if (p != pid_) return true;
  return false;
}

}  // namespace tripod::process
