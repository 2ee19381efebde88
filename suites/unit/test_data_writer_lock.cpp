// One writer at a time in a dataset's folder (data/dataset_writer_lock.h): a second `data prepare`
// or `data synthetic` into a folder being written is refused before it touches anything. Two at
// once deleted each other's files: one said "prepared", exit 0, and the folder was gone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "core/error.h"
#include "data/dataset_writer_lock.h"
#include "data/prepare.h"
#include "data/synthetic_corpus.h"

namespace tripod::data {
namespace {
namespace fs = std::filesystem;

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

SyntheticOptions synthetic_into(const fs::path& dir) {
  SyntheticOptions options;
  options.vocab_size = 24;
  options.order = 1;
  options.tokens = 5000;
  options.out_dir = dir;
  return options;
}

std::string refusal(const std::function<void()>& write) {
  try {
    write();
  } catch (const Error& e) {
    return e.what();
  }
  return "(not refused)";
}

TEST(DatasetWriterLock, ASecondWriterIsRefusedAndTheFirstWritersDatasetIsKept) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_writer_lock_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_synthetic_corpus(synthetic_into(dir / "data"));
  const std::string meta = read_bytes(dir / "data" / "meta.json");
  const std::string shard = read_bytes(dir / "data" / "train_000000.bin");
  {
    const DatasetWriterLock first(dir / "data", "data prepare");  // a writer at work
    SyntheticOptions other = synthetic_into(dir / "data");
    other.seed = 99;
    const std::string expected = "--out " + (dir / "data").string() +
                                 ": another `tripod data prepare` or `data synthetic` is writing the dataset in this "
                                 "folder";
    EXPECT_NE(refusal([&] { write_synthetic_corpus(other); }).find("data synthetic " + expected), std::string::npos);
    std::ofstream(dir / "text.txt") << "some words for a tokenizer\n";
    PrepareOptions prepare;
    prepare.input = dir / "text.txt";
    prepare.out_dir = dir / "data";
    prepare.vocab_size = 300;
    EXPECT_NE(refusal([&] { prepare_text_corpus(prepare); }).find("data prepare " + expected), std::string::npos);
    EXPECT_EQ(read_bytes(dir / "data" / "meta.json"), meta);
    EXPECT_EQ(read_bytes(dir / "data" / "train_000000.bin"), shard);
  }
  // Once the first has ended, the folder is free: rewritten, keeping its lock file.
  SyntheticOptions again = synthetic_into(dir / "data");
  again.seed = 99;
  write_synthetic_corpus(again);
  EXPECT_NE(read_bytes(dir / "data" / "train_000000.bin"), shard);
  EXPECT_TRUE(fs::exists(dir / "data" / kDatasetLockFile));
  fs::remove_all(dir);
}

TEST(DatasetWriterLock, AFolderItMadeAndLeftEmptyGoesWithItsLockFile) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_writer_lock_empty_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  { const DatasetWriterLock lock(dir / "new", "data prepare"); }
  EXPECT_FALSE(fs::exists(dir / "new")) << "a failed preparation leaves no folder behind";
  fs::create_directories(dir / "existing");
  { const DatasetWriterLock lock(dir / "existing", "data prepare"); }
  EXPECT_TRUE(fs::exists(dir / "existing")) << "a folder the user made stays";
  {
    const DatasetWriterLock lock(dir / "written", "data prepare");
    std::ofstream(dir / "written" / "meta.json") << "{}";
  }
  EXPECT_TRUE(fs::exists(dir / "written" / "meta.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tripod::data
