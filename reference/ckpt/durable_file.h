// Files that survive a crash: written under a temporary name, fsynced, renamed into place, and the
// directory fsynced, so a reader finds either the old file or the whole new one, never a part.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>

namespace tripod::ckpt {

// Makes a rename in `dir` durable; filesystems that refuse a directory fsync are left as they are.
void fsync_directory(const std::filesystem::path& dir);

// write(2) until done; throws naming `path` (disk full, I/O error).
void write_fully(int fd, const void* data, std::size_t bytes, const std::filesystem::path& path);

// pread(2) of exactly `bytes` at `offset`; throws naming `path` when the file is shorter.
void read_fully(int fd, void* data, std::size_t bytes, uint64_t offset, const std::filesystem::path& path);

// `text` to path.tmp, fsync, rename over `path`, fsync of the directory.
void write_text_durably(const std::filesystem::path& path, const std::string& text);

// The whole file; throws naming it.
std::string read_text(const std::filesystem::path& path);

// "No space left on device" and the like, for messages.
std::string last_system_error();

}  // namespace tripod::ckpt
