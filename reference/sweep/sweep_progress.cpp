#include "sweep/sweep_progress.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tripod::sweep {
namespace fs = std::filesystem;

RunProgress latest_progress(const fs::path& metrics_jsonl) {
  RunProgress p;
  std::ifstream in(metrics_jsonl, std::ios::binary | std::ios::ate);
  if (!in.good()) return p;
  const std::streamoff size = in.tellg(), tail = std::min<std::streamoff>(size, 16384);  // a few records
  std::string text(static_cast<std::size_t>(tail), '\0');
  in.seekg(size - tail);
  in.read(text.data(), tail);
  std::size_t end = text.size();
  while (end > 0) {  // the last complete step record, newest first
    const std::size_t start = text.rfind('\n', end - 1);
    const std::size_t from = start == std::string::npos ? 0 : start + 1;
    const nlohmann::json record = nlohmann::json::parse(text.substr(from, end - from), nullptr, false);
    if (!record.is_discarded() && record.is_object() && record.contains("step") && record.contains("loss")) {
      p.step = record.at("step").get<int64_t>();
      if (record.at("loss").is_number()) p.loss = record.at("loss").get<double>();
      p.tokens_per_second = record.value("tokens_per_second", 0.0);
      return p;
    }
    if (start == std::string::npos) break;
    end = start;
  }
  return p;
}

std::string duration_text(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  return text;
}

double eta_seconds(double flops_left, double flops_per_second) {
  return flops_per_second > 0 ? flops_left / flops_per_second : -1.0;
}

std::string run_progress_line(const std::string& name, const RunProgress& p, int64_t steps, int64_t tokens_per_step) {
  char text[256];
  if (p.step < 0) {
    std::snprintf(text, sizeof text, "%-22s starting (no step recorded yet)", name.c_str());
    return text;
  }
  const int64_t done = p.step + 1;
  const double eta = p.tokens_per_second > 0
                         ? static_cast<double>((steps - done) * tokens_per_step) / p.tokens_per_second
                         : -1.0;
  std::snprintf(text, sizeof text, "%-22s step %6lld/%-6lld %3.0f%%  loss %7.4f  %6.1fk tok/s  ETA %s", name.c_str(),
                static_cast<long long>(done), static_cast<long long>(steps),
                100.0 * static_cast<double>(done) / static_cast<double>(std::max<int64_t>(steps, 1)), p.loss,
                p.tokens_per_second / 1e3, duration_text(eta).c_str());
  return text;
}

}  // namespace tripod::sweep
