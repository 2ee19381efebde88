#include "train/run_checkpoints.h"

#include <chrono>
#include <cstdio>

#include "ckpt/checkpoint_root.h"
#include "comm/host_collectives.h"
#include "core/wall_clock.h"

namespace tripod {
namespace fs = std::filesystem;

RunCheckpoints::RunCheckpoints(const RunConfig& config, const TrainOptions& options, Backend& backend,
                               Communicator* world, bool root_rank, TrainingEngine& engine,
                               std::function<CheckpointMeta()> meta)
    : config_(config), options_(options), backend_(backend), world_(world), root_rank_(root_rank), engine_(engine),
      meta_(std::move(meta)),
      durable_{options.save_dir, "--save", config.train.save_every},
      local_{options.save_local_dir, "--save-local", config.train.local_save_every} {
  check(local_.root.empty() || enabled(), "--save-local is the fast tier beside --save's durable one: give --save too");
  check(local_.every == 0 || !local_.root.empty(), "train.local_save_every saves to --save-local ROOT: give it");
  // As the fast tier's: a save interval without a root saved nothing, and said nothing, a whole run long.
  check(durable_.every == 0 || enabled(), "train.save_every saves to --save ROOT: give it (without --save the run "
        "writes no checkpoint)");
  check(!config.train.async_save || enabled(), "train.async_save writes --save's checkpoints in the background: give "
        "--save ROOT");
  check(local_.root.empty() || local_.every > 0, "--save-local needs train.local_save_every (steps between its saves)");
  // "./ck/" and "ck" are one folder whether or not it exists yet: made absolute first (weakly_canonical
  // leaves a relative path relative when none of it exists), and without a trailing '/'.
  const auto folder = [](const fs::path& p) {
    fs::path a = fs::weakly_canonical(fs::absolute(p)).lexically_normal();
    return a.has_filename() ? a : a.parent_path();
  };
  TRIPOD_CHECK(local_.root.empty() || folder(local_.root) != folder(durable_.root),
               "--save-local and --save name the same folder ", durable_.root.string(), ": the tiers must be apart");
}

void RunCheckpoints::prepare() {
  const uint64_t bytes = enabled() ? checkpoint_bytes(world_, engine_.state_regions()) : 0;
  for (const Tier* tier : {&durable_, &local_}) {
    if (tier->root.empty()) continue;
    std::string error;
    int removed = 0;
    if (root_rank_) {
      try {
        ckpt::check_save_root(tier->root, bytes, tier->option);
        // Before anything is removed: the leftovers may be another run's saves in progress.
        locks_.push_back(std::make_unique<ckpt::RootLock>(tier->root, tier->option));
        removed = ckpt::remove_leftovers(tier->root);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    const std::vector<std::string> errors = world_ ? all_gather_text(*world_, error, 1024) : std::vector{error};
    check(errors[0].empty(), errors[0]);
    if (root_rank_ && removed > 0)
      std::printf("  removed %d leftover(s) of unfinished saves in %s\n", removed, tier->root.c_str());
  }
}

void RunCheckpoints::warn_if_latest_is_unusable(const fs::path& root) const {
  if (!root_rank_) return;
  if (const std::string problem = ckpt::latest_pointer_problem(root); !problem.empty()) {
    std::fprintf(stderr, "tripod: warning: %s\n", problem.c_str());
    std::fflush(stderr);
  }
}

std::optional<fs::path> RunCheckpoints::newest() const {
  std::optional<fs::path> best;
  for (const Tier* tier : {&durable_, &local_}) {
    if (tier->root.empty()) continue;
    warn_if_latest_is_unusable(tier->root);
    const auto latest = ckpt::find_latest(tier->root);
    if (latest && (!best || ckpt::checkpoint_step(*latest) > ckpt::checkpoint_step(*best))) best = latest;
  }
  return best;
}

std::optional<RunCheckpoints::Loaded> RunCheckpoints::resume() {
  std::optional<fs::path> dir;
  if (options_.resume_dir == "auto") {
    check(enabled(), "--resume auto resumes from the --save root's latest checkpoint: give --save");
    dir = newest();
  } else if (!options_.resume_dir.empty()) {
    dir = ckpt::resolve_checkpoint(options_.resume_dir);
    warn_if_latest_is_unusable(options_.resume_dir);
  }
  if (!dir) {
    // A run from step 0 into a root that holds checkpoints would replace steps of the same number
    // and mix two runs under one `latest` (a forgotten --resume once did that without a word).
    if (const auto held = newest())
      fail(held->parent_path().string(), " already holds checkpoints (the newest: ", held->filename().string(),
           "); this run starts at step 0 and would overwrite or mix with them: continue them with --resume auto, "
           "or give another folder");
    return std::nullopt;
  }
  Tier* const own = tier_holding(*dir);
  // Continued from another root's checkpoint into a root that holds checkpoints, the run would put
  // two runs under one `latest` and its saves would prune the other's (`--resume runs/a/ckpt --save
  // runs/b/ckpt`, a command line copied: b's latest moved to a's continuation, exit 0).
  if (enabled() && own == nullptr)
    if (const auto held = newest())
      fail(held->parent_path().string(), " already holds checkpoints (the newest: ", held->filename().string(),
           "), and this run continues ", dir->string(), ", which is not one of them: its saves would mix the two runs ",
           "under one `latest` and prune the other's; give an empty or new folder, or resume from its own checkpoints");
  Loaded loaded{*dir, resume_from_checkpoint(world_, *dir, engine_.state_regions(), backend_, config_,
                                             options_.allow_resume_changes, meta_().train_tokens_xxh64)};
  if (own != nullptr) take_up_the_timeline_of(*own, loaded.manifest.step);
  engine_.set_step(loaded.manifest.step, loaded.manifest.updates);
  // This step counts as saved in a tier only if the checkpoint is that tier's.
  if (own != nullptr) own->last_saved = loaded.manifest.step;
  last_checkpoint_ = loaded.dir;
  return loaded;
}

// A run resumed from an older checkpoint of its own root (`--resume ROOT/step-2` where `latest`
// names step-6) continues another timeline than the newer ones: `latest` kept naming step 6, so a
// rollback before this run's first save jumped forward to it, and a restart with --resume auto took
// it. `latest` now names the checkpoint the run continues; the newer step directories stay, and its
// own saves of those steps replace them. A newer checkpoint in the other tier is refused: --resume
// auto takes the newest of both tiers, and that one cannot be pointed away from.
void RunCheckpoints::take_up_the_timeline_of(Tier& own, int64_t step) {
  std::optional<fs::path> own_newer;  // own's newest, where it is past `step`
  for (const Tier* tier : {&durable_, &local_}) {
    if (tier->root.empty()) continue;
    const auto held = ckpt::find_latest(tier->root);
    if (!held || ckpt::checkpoint_step(*held) <= step) continue;
    TRIPOD_CHECK(tier == &own, tier->option, " ", tier->root.string(), " holds ", held->filename().string(),
                 ", newer than the ", ckpt::step_dir_name(step), " this run continues from ", own.option, " ",
                 own.root.string(), ": a restart with --resume auto would take that other timeline; remove its "
                 "checkpoints after step ", step, " from ", tier->root.string(), ", or give ", tier->option,
                 " another folder");
    own_newer = held;
  }
  if (!own_newer) return;
  std::string error;
  if (root_rank_) {
    try {
      ckpt::point_latest_at(own.root, step);
      std::printf("  %s holds newer checkpoints (up to %s) than the %s this run continues: `latest` now names it, "
                  "and this run's saves replace those steps as it reaches them\n",
                  own.root.c_str(), own_newer->filename().c_str(), ckpt::step_dir_name(step).c_str());
      std::fflush(stdout);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  // Every rank fails alike, and reads the new `latest` from here on.
  const std::vector<std::string> errors = world_ ? all_gather_text(*world_, error, 1024) : std::vector{error};
  check(errors[0].empty(), errors[0]);
}

RunCheckpoints::Tier* RunCheckpoints::tier_holding(const fs::path& checkpoint) {
  // As typed, "ROOT/step-4/" (a shell's completion), "ROOT/step-4/." and a link to it had no
  // parent but the step itself, and the run was refused as continuing another root's checkpoint.
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(fs::absolute(checkpoint), ec).lexically_normal();
  if (!resolved.has_filename()) resolved = resolved.parent_path();
  for (Tier* tier : {&durable_, &local_})
    if (!tier->root.empty() && fs::equivalent(resolved.parent_path(), tier->root, ec)) return tier;
  return nullptr;
}

RunCheckpoints::Loaded RunCheckpoints::load_last_checkpoint() {
  finish_pending();
  TRIPOD_CHECK(last_checkpoint_.has_value(), "no checkpoint of this run's under ", durable_.root.string(),
               local_.root.empty() ? "" : " or " + local_.root.string());
  Loaded loaded{*last_checkpoint_, resume_from_checkpoint(world_, *last_checkpoint_, engine_.state_regions(), backend_,
                                                          config_, /*allow_changes=*/true)};
  engine_.set_step(loaded.manifest.step, loaded.manifest.updates);
  return loaded;
}

void RunCheckpoints::record_rollback_position(const fs::path& dir, int64_t next_sample) {
  if (tier_holding(dir) != nullptr) record_data_position(world_, dir, next_sample);
}

void RunCheckpoints::after_step(bool last_step) {
  if (!enabled()) return;
  if (pending_ && pending_->poll()) finish_pending();
  if (last_step) return;  // the run's final save follows, synchronous and durable
  const int64_t step = engine_.step();
  auto due = [&](const Tier& tier) { return !tier.root.empty() && tier.every > 0 && step % tier.every == 0; };
  if (due(durable_)) save(durable_, config_.train.async_save);
  else if (due(local_)) save(local_, config_.train.async_save);
}

bool RunCheckpoints::saves_after(int64_t step) const {
  if (!enabled()) return false;
  auto due = [&](const Tier& tier) { return !tier.root.empty() && tier.every > 0 && step % tier.every == 0; };
  return step == config_.train.steps || due(durable_) || due(local_);
}

bool RunCheckpoints::saves_in_background() const {
  if (!enabled() || !config_.train.async_save) return false;
  auto before_the_end = [&](const Tier& tier) {
    return !tier.root.empty() && tier.every > 0 && tier.every < config_.train.steps;
  };
  return before_the_end(durable_) || before_the_end(local_);
}

fs::path RunCheckpoints::save_now() { return save(durable_, false); }

fs::path RunCheckpoints::save(Tier& tier, bool in_background) {
  if (tier.root.empty()) return {};
  finish_pending();
  const int64_t step = engine_.step();
  const fs::path dir = tier.root / ckpt::step_dir_name(step);
  if (step == tier.last_saved) {
    last_checkpoint_ = dir;
    return dir;
  }
  const auto start = std::chrono::steady_clock::now();
  if (in_background) {
    pending_ = std::make_unique<AsyncSave>(world_, tier.root, engine_.state_regions(), backend_, meta_(),
                                           std::move(buffers_));
    tier.last_saved = step;
    last_checkpoint_ = dir;  // complete once finish_pending has run, as load_last_checkpoint does first
    return dir;
  }
  save_checkpoint(world_, tier.root, engine_.state_regions(), backend_, meta_());
  tier.last_saved = step;
  last_checkpoint_ = dir;
  if (root_rank_) {
    std::printf("  checkpoint: step %lld saved to %s (%.2f s)\n", static_cast<long long>(step), dir.c_str(),
                seconds_since(start));
    std::fflush(stdout);
  }
  return dir;
}

void RunCheckpoints::finish_pending() {
  if (!pending_) return;
  const auto start = std::chrono::steady_clock::now();
  const std::unique_ptr<AsyncSave> done = std::move(pending_);
  done->finish();
  buffers_ = done->release_buffers();
  report_pending(*done, seconds_since(start));
}

void RunCheckpoints::report_pending(AsyncSave& done, double waited) const {
  if (!root_rank_) return;
  std::printf("  checkpoint: step %lld saved to %s (in the background: %.2f s writing, %.2f s publishing; training "
              "stalled %.3f s for the snapshot, %.3f s to exchange file entries, %.3f s waiting)\n",
              static_cast<long long>(done.step()), done.directory().c_str(), done.write_seconds(),
              done.publish_seconds(), done.snapshot_seconds(), done.exchange_seconds(), waited);
  std::fflush(stdout);
}

}  // namespace tripod
