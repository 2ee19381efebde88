#include "core/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace tripod {
namespace {

const char* g_program = "tripod";

// Only async-signal-safe calls from here on: write, backtrace (warmed up at install), raise.
void write_text(const char* text) {
  for (std::size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (segmentation fault)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic trap)";
    case SIGILL: return "SIGILL (illegal instruction: a binary built for another CPU?)";
    case SIGABRT: return "SIGABRT (abort)";
    default: return "(a fatal signal)";
  }
}

void on_fatal_signal(int sig) {
  write_text("\n");
  write_text(g_program);
  write_text(": fatal signal ");
  write_text(signal_name(sig));
  write_text("; its stack follows (reports/symbolize_stack.py LOG BINARY names the functions):\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // SA_RESETHAND put the default action back: the process dies of the signal as it would have.
  ::raise(sig);
}

}  // namespace

void install_crash_report(const char* program) {
  // Under a launcher, the rank too: the job's other ranks die of its absence, with their own words.
  static char name[128];
  const char* rank = nullptr;
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"})
    if ((rank = std::getenv(variable)) != nullptr && *rank != '\0') break;
  if (rank != nullptr && *rank != '\0')
    std::snprintf(name, sizeof name, "%s (rank %s)", program, rank);
  else
    std::snprintf(name, sizeof name, "%s", program);
  g_program = name;
  void* warm[1];
  ::backtrace(warm, 1);  // loads the unwinder now: the first call may allocate, which a handler must not
  static char alternate_stack[64 * 1024];
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof alternate_stack;
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  action.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &action, nullptr);
}

}  // namespace tripod
