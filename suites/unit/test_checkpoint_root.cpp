// A checkpoint root's own bookkeeping (ckpt/checkpoint_root.h) on hand-made step directories: a
// save that cannot be put in place or selected leaves the root as it was, leftovers of dead saves
// and start-ups are recognised and cleared, and a step set aside for a save that never landed is
// put back rather than deleted.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/checkpoint_root.h"
#include "core/error.h"

namespace tripod {
namespace {
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("tripod_ckroot_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A complete checkpoint as the root sees it: a directory with a manifest, here holding `tag`.
void make_checkpoint(const fs::path& dir, const std::string& tag) {
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.json") << tag;
}

std::string tag_of(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  std::string tag;
  std::getline(in, tag);
  return tag;
}

std::string latest_of(const fs::path& root) {
  std::ifstream in(root / "latest");
  std::string name;
  std::getline(in, name);
  return name;
}

// `latest` cannot be written: a directory (with something in it) where its temporary file goes.
void block_latest(const fs::path& root) {
  fs::create_directories(root / "latest.tmp" / "in-the-way");
}

TEST(CheckpointRoot, ASaveWhoseLatestCannotBeWrittenLeavesNoStepBehind) {
  // A full disk at `latest` left the new complete step directory in place, unselected, its space
  // taken, and nothing removed it: `--resume auto` went on from the previous step beside it.
  const fs::path root = fresh_dir("latest_fails");
  make_checkpoint(root / "step-00000002", "old 2");
  ckpt::point_latest_at(root, 2);
  make_checkpoint(root / ".partial-step-00000004", "new 4");
  block_latest(root);
  EXPECT_THROW(ckpt::publish_checkpoint(root, root / ".partial-step-00000004", 4, 2), Error);
  EXPECT_FALSE(fs::exists(root / "step-00000004"));
  EXPECT_EQ(latest_of(root), "step-00000002");
  EXPECT_EQ(tag_of(root / "step-00000002"), "old 2");
  fs::remove_all(root);
}

TEST(CheckpointRoot, ASaveOfAStepAlreadyThereThatFailsPutsTheOldOneBack) {
  // A resumed run saving step 4 again sets the old step-4 aside first; a failure after that left
  // only `.replaced-step-00000004`, which the next start-up deleted: a complete checkpoint lost.
  const fs::path root = fresh_dir("resave_fails");
  make_checkpoint(root / "step-00000004", "old 4");
  ckpt::point_latest_at(root, 4);
  make_checkpoint(root / ".partial-step-00000004", "new 4");
  block_latest(root);
  EXPECT_THROW(ckpt::publish_checkpoint(root, root / ".partial-step-00000004", 4, 2), Error);
  EXPECT_EQ(tag_of(root / "step-00000004"), "old 4");
  EXPECT_FALSE(fs::exists(root / ".replaced-step-00000004"));
  EXPECT_EQ(latest_of(root), "step-00000004");
  fs::remove_all(root);
}

TEST(CheckpointRoot, AStepSetAsideByASaveThatDiedIsPutBackAtStartUp) {
  // The state a save of step 4 leaves when killed between its two renames.
  const fs::path root = fresh_dir("replaced_left");
  make_checkpoint(root / "step-00000002", "old 2");
  make_checkpoint(root / ".replaced-step-00000004", "old 4");
  ckpt::point_latest_at(root, 2);
  std::ofstream(root / "latest") << "step-00000004\n";  // as the killed save had not moved it yet
  EXPECT_EQ(ckpt::remove_leftovers(root), 0);
  EXPECT_EQ(tag_of(root / "step-00000004"), "old 4");
  EXPECT_FALSE(fs::exists(root / ".replaced-step-00000004"));
  ASSERT_TRUE(ckpt::find_latest(root).has_value());
  EXPECT_EQ(ckpt::find_latest(root)->filename(), "step-00000004");
  // Where the new one did land, the set-aside copy is the leftover and goes.
  make_checkpoint(root / ".replaced-step-00000004", "older 4");
  EXPECT_EQ(ckpt::remove_leftovers(root), 1);
  EXPECT_EQ(tag_of(root / "step-00000004"), "old 4");
  fs::remove_all(root);
}

TEST(CheckpointRoot, LeftoversOfAFirstSaveOrAStartUpStillMakeACheckpointRoot) {
  // A first save killed while writing `latest` (latest.tmp, no latest), or a start-up killed in its
  // write probe: the root was refused as "not a Tripod checkpoint root" ever after.
  for (const std::string leftover : {"latest.tmp", ".tripod-write-test-12345", ".replaced-step-00000006"}) {
    SCOPED_TRACE(leftover);
    const fs::path root = fresh_dir("leftover");
    make_checkpoint(root / "step-00000002", "2");
    if (leftover.rfind(".replaced", 0) == 0) make_checkpoint(root / leftover, "6");
    else std::ofstream(root / leftover) << "x";
    EXPECT_NO_THROW(ckpt::check_save_root(root, 0));
    EXPECT_EQ(ckpt::remove_leftovers(root), leftover.rfind(".replaced", 0) == 0 ? 0 : 1);
    EXPECT_FALSE(fs::exists(root / leftover));
    fs::remove_all(root);
  }
  // Someone else's files are still refused, a .tmp of theirs too.
  for (const std::string theirs : {"notes.txt", "draft.tmp"}) {
    SCOPED_TRACE(theirs);
    const fs::path root = fresh_dir("theirs");
    make_checkpoint(root / "step-00000002", "2");
    std::ofstream(root / theirs) << "x";
    EXPECT_THROW(ckpt::check_save_root(root, 0), Error);
    fs::remove_all(root);
  }
}

TEST(CheckpointRoot, LatestIsPointedOnlyAtACompleteCheckpoint) {
  const fs::path root = fresh_dir("point");
  make_checkpoint(root / "step-00000002", "2");
  fs::create_directories(root / "step-00000004");  // no manifest
  EXPECT_THROW(ckpt::point_latest_at(root, 4), Error);
  EXPECT_THROW(ckpt::point_latest_at(root, 6), Error);
  ckpt::point_latest_at(root, 2);
  EXPECT_EQ(latest_of(root), "step-00000002");
  fs::remove_all(root);
}

}  // namespace
}  // namespace tripod
