#include "ckpt/checkpoint_root.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "ckpt/durable_file.h"
#include "ckpt/manifest.h"
#include "ckpt/root_lock.h"
#include "core/error.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;

namespace {

// The step of a directory named step-NNNNNNNN, or -1.
int64_t step_of(const std::string& name) {
  if (name.size() != 13 || name.rfind("step-", 0) != 0) return -1;
  int64_t step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool complete(const fs::path& dir) { return fs::is_regular_file(dir / kManifestFile); }

// Complete step directories, oldest first.
std::vector<std::pair<int64_t, fs::path>> checkpoints_in(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && complete(entry.path())) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

constexpr const char* kReplacedPrefix = ".replaced-";    // + step-N: a checkpoint set aside while its step is saved again
constexpr const char* kWriteProbePrefix = ".tripod-write-test-";  // + a pid: check_save_root's probe

bool starts_with(const std::string& name, const std::string& prefix) { return name.rfind(prefix, 0) == 0; }
bool is_temporary_file(const std::string& name) { return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0; }

// What a save or start-up of Tripod's own leaves in a root when it dies part-way.
bool is_leftover(const std::string& name) {
  return starts_with(name, ".partial-step-") || starts_with(name, std::string(kReplacedPrefix) + "step-") ||
         starts_with(name, kWriteProbePrefix) || is_temporary_file(name);
}

bool is_checkpoint_root(const fs::path& root) {
  if (fs::exists(root / kLatestFile)) return true;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    // A .tmp of another's is not taken for ours here: only `latest`'s (a first save killed while
    // writing it left the root with no `latest`, which was then refused as someone else's folder).
    const bool ours = step_of(name) >= 0 || name == kLockFile || name == std::string(kLatestFile) + ".tmp" ||
                      (is_leftover(name) && !is_temporary_file(name));
    if (!ours) return false;
  }
  return true;  // only step directories, leftovers of saves and start-ups, and the runs' lock file
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

int64_t checkpoint_step(const fs::path& dir) { return step_of(dir.filename().string()); }

fs::path partial_dir(const fs::path& root, int64_t step) { return root / std::string(".partial-").append(step_dir_name(step)); }

void check_save_root(const fs::path& root, uint64_t bytes_needed, const std::string& option) {
  std::error_code ec;
  if (fs::exists(root, ec)) {
    TRIPOD_CHECK(fs::is_directory(root), option, " ", root.string(),
                 ": a file of that name exists and is not a Tripod ",
                 "checkpoint root; refusing to replace it (choose another path)");
    TRIPOD_CHECK(!fs::exists(root / "state.json"), option, " ", root.string(),
                 ": it holds a single checkpoint of Tripod's ",
                 "old format (state.json); refusing to touch it (choose another path, or move it aside)");
    TRIPOD_CHECK(fs::is_empty(root) || is_checkpoint_root(root), option, " ", root.string(),
                 ": the folder exists and is not a Tripod checkpoint root (no 'latest', files other than step-* ",
                 "checkpoints); refusing to write into it and risk its files (choose another path)");
  }
  fs::create_directories(root, ec);
  TRIPOD_CHECK(fs::is_directory(root), option, " ", root.string(), ": cannot create it",
               ec ? " (" + ec.message() + ")" : std::string());
  const fs::path probe = root / (kWriteProbePrefix + std::to_string(::getpid()));
  {
    std::ofstream out(probe);
    out << "x";
    out.flush();
    TRIPOD_CHECK(out.good(), option, " ", root.string(), ": cannot write in it");
  }
  fs::remove(probe, ec);
  if (bytes_needed == 0) return;
  struct statvfs st {};
  if (::statvfs(root.c_str(), &st) != 0) return;
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  TRIPOD_CHECK(free_bytes >= bytes_needed, option, " ", root.string(), ": a checkpoint of this run needs about ",
               mib(bytes_needed), " but only ", mib(free_bytes), " are free there");
}

int remove_leftovers(const fs::path& root) {
  int removed = 0;
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (is_leftover(entry.path().filename().string())) doomed.push_back(entry.path());
  for (const fs::path& p : doomed) {
    // A checkpoint set aside for a new save of its step, which died before that one was in place:
    // it is the only copy of that step, so it goes back (deleting it lost a complete checkpoint).
    const std::string name = p.filename().string();
    if (starts_with(name, kReplacedPrefix) && complete(p)) {
      const fs::path target = root / name.substr(std::string(kReplacedPrefix).size());
      if (!complete(target)) {
        fs::remove_all(target, ec);
        fs::rename(p, target, ec);
        if (!ec) continue;
      }
    }
    removed += fs::remove_all(p, ec) > 0;
  }
  return removed;
}

namespace {

// The name ROOT/latest holds (its first line), or nothing when the file is absent.
std::optional<std::string> latest_pointer(const fs::path& root) {
  std::ifstream in(root / kLatestFile);
  if (!in) return std::nullopt;
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

std::optional<fs::path> find_latest(const fs::path& root) {
  const std::optional<std::string> name = latest_pointer(root);
  if (name && step_of(*name) >= 0 && complete(root / *name)) return root / *name;
  const auto found = checkpoints_in(root);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

std::string latest_pointer_problem(const fs::path& path) {
  const fs::path root = path.filename() == kLatestFile ? path.parent_path() : path;
  if (!fs::is_directory(root) || fs::exists(root / kManifestFile)) return "";
  const std::optional<std::string> name = latest_pointer(root);
  if (!name || (step_of(*name) >= 0 && complete(root / *name))) return "";
  const std::string why = step_of(*name) < 0          ? "which is not a step directory's name (step-NNNNNNNN)"
                          : !fs::exists(root / *name) ? "which does not exist"
                                                      : "which is not a complete checkpoint (no " +
                                                            std::string(kManifestFile) + ")";
  std::string text = (root / kLatestFile).string() + " names '" + name->substr(0, 64) + "', " + why + "; ";
  const auto fallback = find_latest(root);
  return text + (fallback ? "the newest complete checkpoint, " + fallback->filename().string() + ", is used instead"
                          : "and the root holds no complete checkpoint");
}

fs::path resolve_checkpoint(const fs::path& path) {
  TRIPOD_CHECK(fs::exists(path), "checkpoint ", path.string(), " does not exist");
  // ROOT/latest, the pointer file a user sees beside the step directories, means the root's latest.
  if (path.filename() == kLatestFile && fs::is_regular_file(path) && !path.parent_path().empty())
    return resolve_checkpoint(path.parent_path());
  TRIPOD_CHECK(fs::is_directory(path), "checkpoint ", path.string(), " is a file, not a checkpoint directory");
  if (fs::exists(path / kManifestFile)) return path;
  TRIPOD_CHECK(
      !fs::exists(path / "state.json"), "checkpoint ", path.string(), " is in Tripod's old single-file format ",
      "(state.json, format version 1), which this version does not read; convert it with `tripod ckpt upgrade ",
      path.string(), " NEW_ROOT` and resume from NEW_ROOT");
  const auto latest = find_latest(path);
  TRIPOD_CHECK(latest.has_value(), "checkpoint ", path.string(),
               " holds no complete checkpoint (no step-* directory with a ", kManifestFile,
               "; an unfinished save leaves none)");
  return *latest;
}

void point_latest_at(const fs::path& root, int64_t step) {
  const fs::path dir = root / step_dir_name(step);
  TRIPOD_CHECK(complete(dir), "cannot point ", (root / kLatestFile).string(), " at ", dir.string(),
               ": it is not a complete checkpoint");
  write_text_durably(root / kLatestFile, step_dir_name(step) + "\n");
}

fs::path publish_checkpoint(const fs::path& root, const fs::path& staged, int64_t step, int64_t keep) {
  fsync_directory(staged);
  const fs::path target = root / step_dir_name(step);
  std::error_code ec;
  // A checkpoint of the same step (a run resumed and saved again) is set aside, not deleted,
  // until the new one is in place; find_latest skips an incomplete name meanwhile.
  const fs::path replaced = root / (kReplacedPrefix + step_dir_name(step));
  const bool replacing = fs::exists(target);
  if (replacing) {
    fs::remove_all(replaced, ec);
    fs::rename(target, replaced, ec);
    TRIPOD_CHECK(!ec, "cannot move the previous ", target.string(), " aside: ", ec.message());
  }
  // Where the new checkpoint cannot be put in place or selected, the root goes back to what it
  // was: no complete step directory that `latest` does not name (a full disk at `latest` left one,
  // its space taken and never removed), and the step set aside back in its place.
  try {
    fs::rename(staged, target, ec);
    TRIPOD_CHECK(!ec, "cannot move the finished checkpoint ", staged.string(), " to ", target.string(), ": ",
                 ec.message());
    fsync_directory(root);
    write_text_durably(root / kLatestFile, step_dir_name(step) + "\n");
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(target, ignored);  // the new checkpoint, if the rename happened (else nothing is there)
    if (replacing) fs::rename(replaced, target, ignored);
    throw;
  }
  fs::remove_all(replaced, ec);
  // Pruned among this step and the older ones only: a newer step directory is of a timeline the
  // run went back from (resumed from an older checkpoint, or rolled back), and counting it pruned
  // the run's own history first - the checkpoint it had resumed from went at its first save.
  std::vector<fs::path> timeline;  // oldest first, ending at target
  for (const auto& [held_step, dir] : checkpoints_in(root))
    if (held_step <= step) timeline.push_back(dir);
  const std::size_t kept = static_cast<std::size_t>(std::max<int64_t>(keep, 1));
  for (std::size_t i = 0; i + kept < timeline.size(); ++i)
    if (timeline[i] != target) fs::remove_all(timeline[i], ec);
  return target;
}

}  // namespace tripod::ckpt
