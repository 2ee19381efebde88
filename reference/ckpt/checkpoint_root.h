// Where checkpoints live: `--save ROOT` makes ROOT a checkpoint root,
//
//   ROOT/step-00000010/   manifest.json, shard-00000.bin, ...   (one complete checkpoint)
//   ROOT/step-00000020/
//   ROOT/latest           "step-00000020": the newest complete checkpoint, replaced atomically
//   ROOT/.partial-step-00000030/   a save in progress (or a dead one's leftovers, removed at start)
//
// A save writes its step into .partial-*, the manifest last, then renames the directory into
// place and only then moves `latest`: a crash at any point leaves the previous checkpoint whole
// and selected. The last `keep` checkpoints up to the latest are kept (never fewer than the latest).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace tripod::ckpt {

inline constexpr const char* kLatestFile = "latest";

std::string step_dir_name(int64_t step);  // "step-00000010"
// The step a checkpoint directory holds, from its name ("step-00000010": 10); -1 if not one.
int64_t checkpoint_step(const std::filesystem::path& dir);
// The staging directory of a save of `step` under `root`.
std::filesystem::path partial_dir(const std::filesystem::path& root, int64_t step);

// `--save ROOT` must be absent, an empty directory or a checkpoint root; anything else - a folder
// of other files, a plain file, a single checkpoint of the old format - is refused, never deleted.
// Its parent must be creatable and ROOT writable, with at least `bytes_needed` free (0: unchecked).
// Call at start-up, so a bad target is found before the training it would lose.
// `option` names the command-line option in messages ("--save", "--save-local").
void check_save_root(const std::filesystem::path& root, uint64_t bytes_needed, const std::string& option = "--save");

// Removes what dead saves and start-ups left in `root` (.partial-* directories, *.tmp files, write
// probes) and returns how many; a checkpoint set aside for a save of its step that never landed
// (.replaced-step-N without a complete step-N) is put back instead.
int remove_leftovers(const std::filesystem::path& root);

// The newest complete checkpoint under `root` (what `latest` names, or, if that is missing or
// incomplete, the highest step directory with a manifest), or nothing.
std::optional<std::filesystem::path> find_latest(const std::filesystem::path& root);
// Why the `latest` file of a root cannot be followed, so that find_latest falls back (an edited
// or damaged file, its step directory deleted): "" when it can, when there is no `latest`, or when
// `path` (a root, ROOT/latest or one checkpoint, as for resolve_checkpoint) names one checkpoint.
std::string latest_pointer_problem(const std::filesystem::path& path);

// `path` names one checkpoint (a step directory) or a root (its latest; also ROOT/latest); returns the checkpoint
// directory, or throws saying what `path` is instead (nothing there, an old-format checkpoint...).
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// Points root's `latest` at its complete checkpoint of `step` (atomically and durably), or throws.
void point_latest_at(const std::filesystem::path& root, int64_t step);

// Moves a finished `staged` directory (manifest written) into place as root/step-N, points
// `latest` at it, and deletes the oldest checkpoints beyond `keep` among this step and the older
// ones (newer steps, of a timeline the run went back from, stay until it saves those steps itself).
// Returns the final directory.
// Where the move or `latest` fails, the root is left as it was (a step-N it replaced back in
// place, the new one removed) and the error thrown.
std::filesystem::path publish_checkpoint(const std::filesystem::path& root, const std::filesystem::path& staged,
                                         int64_t step, int64_t keep);

}  // namespace tripod::ckpt
