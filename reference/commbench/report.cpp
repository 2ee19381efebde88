#include "commbench/report.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <fstream>

namespace tripod::commbench {

namespace {

// printf into a std::string (the formats below are nccl-tests' own, so printf it is).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return buffer;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "CPU";
}

}  // namespace

std::string nccl_program_name(Collective c) { return collective_spec(c).program; }

std::string header_text(Collective c, const CommBenchSettings& s, const std::vector<std::string>& notes) {
  const bool by_factor = s.step_factor > 1;
  // nThread and nGpus describe one process: here one thread driving one CPU "device".
  std::string text = format("# Collective test starting: %s\n", nccl_program_name(c).c_str());
  text += format("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d "
                 "agg iters: %d validation: %d graph: %d\n",
                 1, 1, static_cast<long>(s.min_bytes), static_cast<long>(s.max_bytes),
                 static_cast<long>(by_factor ? s.step_factor : s.step_bytes), by_factor ? "factor" : "bytes",
                 s.warmup_iters, s.iters, 1, s.check_iters, 0);
  for (const std::string& note : notes) text += "# " + note + "\n";
  text += "#\n# Using devices\n";
  return text;
}

std::string device_line(int world_rank, int group_index, int device) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  // nccl-tests prints the PCI address in the brackets; a CPU rank has none.
  return format("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] %s\n", world_rank, group_index,
                static_cast<int>(getpid()), host, device, cpu_model().c_str());
}

std::string column_header_text() {
  std::string text = "#\n";
  text += format("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
                 "", "", "", "");
  text += format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type",
                 "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  text += format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "",
                 "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return text;
}

std::string row_prefix(int64_t bytes, int64_t count, const std::string& type, const std::string& op, int root) {
  return format("%12li  %12li  %8s  %6s  %6i", static_cast<long>(bytes), static_cast<long>(count), type.c_str(),
                op.c_str(), root);
}

std::string row_result(double seconds, const Bandwidth& bw, int64_t wrong) {
  const double us = seconds * 1e6;
  // nccl-tests keeps the time 7 characters wide by dropping decimals as it grows.
  const std::string time = us >= 10000.0 ? format("%7.0f", us) : us >= 100.0 ? format("%7.1f", us) : format("%7.2f", us);
  if (wrong < 0) return format("  %7s  %6.2f  %6.2f  %5s", time.c_str(), bw.algbw, bw.busbw, "N/A");
  return format("  %7s  %6.2f  %6.2f  %5g", time.c_str(), bw.algbw, bw.busbw, static_cast<double>(wrong));
}

std::string footer_text(Collective c, int64_t out_of_bounds, double avg_busbw) {
  std::string text = format("# Out of bounds values : %ld %s\n", static_cast<long>(out_of_bounds),
                            out_of_bounds ? "FAILED" : "OK");
  text += format("# Avg bus bandwidth    : %g %s\n", avg_busbw, "");
  text += "#\n";
  text += format("# Collective test concluded: %s\n", nccl_program_name(c).c_str());
  return text;
}

}  // namespace tripod::commbench
