// The lock on an output folder itself (core/folder_writer_lock.h with no lock file), which `export
// hf` and `golden` hold while they write: a second writer is refused before it touches anything,
// nothing is left in the folder, and a folder the writer made and left empty goes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/folder_writer_lock.h"

namespace tripod {
namespace {
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(FolderWriterLock, OnTheFolderItselfASecondWriterIsRefusedAndNothingIsWrittenIntoIt) {
  const fs::path dir = fresh_dir("tripod_folder_lock");
  {
    const FolderWriterLock first(dir / "out", "", "refused: out is being written");
    EXPECT_TRUE(fs::is_directory(dir / "out"));
    EXPECT_TRUE(fs::is_empty(dir / "out")) << "no lock file in a folder whose every file is the product";
    std::string message = "(not refused)";
    try {
      const FolderWriterLock second(dir / "out", "", "refused: out is being written");
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("refused: out is being written"), std::string::npos) << message;
    std::ofstream(dir / "out" / "model.safetensors") << "bytes";
  }
  // The first has ended: the folder is free, and what it wrote stays.
  { const FolderWriterLock again(dir / "out", "", "refused"); }
  EXPECT_TRUE(fs::exists(dir / "out" / "model.safetensors"));
  fs::remove_all(dir);
}

TEST(FolderWriterLock, AFolderItMadeAndLeftEmptyGoesAndOneItWasGivenStays) {
  const fs::path dir = fresh_dir("tripod_folder_lock_empty");
  { const FolderWriterLock lock(dir / "new", "", "refused"); }
  EXPECT_FALSE(fs::exists(dir / "new")) << "a write that failed before its first file leaves no folder behind";
  fs::create_directories(dir / "given");
  { const FolderWriterLock lock(dir / "given", "", "refused"); }
  EXPECT_TRUE(fs::is_directory(dir / "given")) << "a folder the user made stays";
  std::ofstream(dir / "a-file") << "x";
  std::string message = "(not refused)";
  try {
    const FolderWriterLock lock(dir / "a-file", "", "refused");
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_EQ(message, (dir / "a-file").string() + " is a file, not a folder");
  EXPECT_TRUE(fs::is_regular_file(dir / "a-file"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tripod
