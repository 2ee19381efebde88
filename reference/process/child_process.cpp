#include "process/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>


#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace tripod::process {
namespace fs = std::filesystem;

fs::path self_executable() { return fs::read_symlink("/proc/self/exe"); }

pid_t spawn_logged(const fs::path& executable, const std::vector<std::string>& args, const fs::path& log,
                   const std::map<std::string, std::string>& env) {
  // Everything the child needs is built before fork: after fork only async-signal-safe calls are
  // allowed (the driver may have OpenMP threads, and one of them may hold the malloc lock).
  std::vector<std::string> argv_text = {executable.string()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (!env.contains(key)) env_text.push_back(entry);
  }
  for (const auto& [key, value] : env) env_text.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  TRIPOD_CHECK(log_fd >= 0, "cannot open run log ", log.string(), ": ", std::strerror(errno));
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Made before the fork: between fork and exec only async-signal-safe calls (write) are allowed.
  const std::string exec_failed = std::string("tripod: error: cannot execute ") + argv[0] + "\n";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Die with the driver: a killed sweep must not leave runs training (and checkpointing) behind.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  check(pid > 0, "cannot start a run process: ", std::strerror(fork_errno));
  return pid;
}

namespace {
ChildExit decode(pid_t pid, int status) {
  ChildExit exit;
  exit.pid = pid;
  exit.signaled = WIFSIGNALED(status);
  exit.code = exit.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  return exit;
}
}  // namespace

ChildExit poll_child_exit() {
  int status = 0;
  const pid_t pid = ::waitpid(-1, &status, WNOHANG);
  return pid > 0 ? decode(pid, status) : ChildExit{};
}

ChildExit wait_child(pid_t pid) {
  int status = 0;
  pid_t got;
  do got = ::waitpid(pid, &status, 0);
  while (got < 0 && errno == EINTR);
  return got > 0 ? decode(got, status) : ChildExit{pid, false, -1};
}

ChildExit run_foreground(const fs::path& executable, const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv_text = {executable.string()};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Made before fork: the child may only make async-signal-safe calls before exec.
  const std::string failed = "tripod: error: cannot execute " + executable.string() + "\n";
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    ::execv(argv[0], argv.data());
    (void)!::write(STDERR_FILENO, failed.data(), failed.size());
    ::_exit(127);
  }
  TRIPOD_CHECK(pid > 0, "cannot start ", executable.string(), ": ", std::strerror(errno));
  return wait_child(pid);
}

std::string describe_exit(const ChildExit& exit) {
  if (!exit.signaled) return "exit status " + std::to_string(exit.code);
  return "killed by signal " + std::to_string(exit.code) + " (" + strsignal(exit.code) + ")" +
         (exit.code == SIGKILL ? ": out of memory?" : "");
}

namespace {
// A signal handler can only talk to the program through a global; this is the one such count.
volatile std::sig_atomic_t g_interrupt_requested = 0;
void request_interrupt(int) {
  if (g_interrupt_requested < 1000) g_interrupt_requested = g_interrupt_requested + 1;  // a count, bounded
}
struct sigaction g_previous_int, g_previous_term, g_previous_hup;
bool g_hup_taken = false;
}  // namespace

InterruptScope::InterruptScope() {
  g_interrupt_requested = 0;
  struct sigaction action {};
  action.sa_handler = request_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &g_previous_int);
  ::sigaction(SIGTERM, &action, &g_previous_term);
  // SIGHUP (its terminal or ssh session gone) killed a run without its checkpoint; it is taken
  // too, as torchrun takes it, unless it is ignored: `nohup` asked for the run to go on.
  struct sigaction current {};
  g_hup_taken = ::sigaction(SIGHUP, nullptr, &current) == 0 && current.sa_handler != SIG_IGN;
  if (g_hup_taken) ::sigaction(SIGHUP, &action, &g_previous_hup);
}

InterruptScope::~InterruptScope() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  if (g_hup_taken) ::sigaction(SIGHUP, &g_previous_hup, nullptr);
}

bool InterruptScope::interrupted() const { return g_interrupt_requested != 0; }
int InterruptScope::interrupts() const { return static_cast<int>(g_interrupt_requested); }

}  // namespace tripod::process
