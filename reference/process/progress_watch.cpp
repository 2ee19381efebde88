#include "process/progress_watch.h"

#include <algorithm>
#include <charconv>
#include <fstream>

namespace tripod::process {

std::optional<int64_t> progress_step(std::string_view line) {
  for (std::size_t at = line.find("step"); at != std::string_view::npos; at = line.find("step", at + 1)) {
    std::size_t before = at;
    while (before > 0 && line[before - 1] == ' ') --before;
    if (before > 0 && line[before - 1] != ':' && line[before - 1] != '>') continue;  // "after step 3/9" is not one
    std::size_t p = at + 4;
    if (p >= line.size() || line[p] != ' ') continue;
    while (p < line.size() && line[p] == ' ') ++p;
    int64_t step = 0;
    const char* end = line.data() + line.size();
    const auto [rest, error] = std::from_chars(line.data() + p, end, step);
    if (error != std::errc() || rest == end || *rest != '/') continue;
    if (rest + 1 == end || rest[1] < '0' || rest[1] > '9') continue;
    return step;
  }
  return std::nullopt;
}

std::optional<int64_t> divergence_step(std::string_view error_line) {
  const std::size_t marker = error_line.find("(training diverged)");
  if (marker == std::string_view::npos) return std::nullopt;
  std::optional<int64_t> step;
  for (std::size_t at = error_line.find("step "); at < marker; at = error_line.find("step ", at + 1)) {
    int64_t n = 0;
    const auto [rest, error] = std::from_chars(error_line.data() + at + 5, error_line.data() + marker, n);
    if (error == std::errc() && rest != error_line.data() + at + 5) step = n;
  }
  return step;
}

std::optional<int64_t> latest_checkpoint_step(const std::filesystem::path& root) {
  std::ifstream in(root / "latest");
  if (!in) return 0;  // no checkpoint yet: the command starts again from step 0
  std::string name;
  std::getline(in, name);
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (!name.starts_with("step-") || name.size() == 5) return std::nullopt;
  int64_t step = 0;
  const auto [rest, error] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  if (error != std::errc() || rest != name.data() + name.size()) return std::nullopt;
  return step;
}

void ProgressWatch::on_line(OutputStream stream, std::string_view line) {
  if (const std::size_t at = line.find("tripod: error:"); at != std::string_view::npos)
    error_line_ = std::string(line.substr(at, 500));
  if (const std::optional<int64_t> step = divergence_step(line)) diverged_at_ = step;
  if (stream != OutputStream::out) return;
  const std::optional<int64_t> step = progress_step(line);
  if (!step) return;
  last_step_ = std::max(last_step_.value_or(*step), *step);
  if (checkpoints_.empty()) return;  // no checkpoint to measure the loss from
  const Clock::time_point now = Clock::now();
  seen_.emplace_back(*step, now);
  // Bound the kept lines by the checkpoints written so far (read at most once a second).
  if (now - checkpoint_read_ < std::chrono::seconds(1)) return;
  checkpoint_read_ = now;
  const int64_t latest = resume_step().value_or(0);
  while (!seen_.empty() && seen_.front().first < latest) {
    seen_.pop_front();
    forgot_earlier_ = true;
  }
}

std::optional<ProgressWatch::Clock::time_point> ProgressWatch::reached(int64_t c) const {
  bool earlier = forgot_earlier_;
  for (const auto& [step, time] : seen_) {
    if (step >= c) return step == c || earlier ? std::optional(time) : std::nullopt;
    earlier = true;
  }
  return std::nullopt;
}

}  // namespace tripod::process
