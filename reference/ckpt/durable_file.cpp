#include "ckpt/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tripod::ckpt {

std::string last_system_error() { return std::strerror(errno); }

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_fully(int fd, const void* data, std::size_t bytes, const std::filesystem::path& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    TRIPOD_CHECK(n > 0, "cannot write ", path.string(), ": ", n < 0 ? last_system_error() : std::string("no progress"));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void read_fully(int fd, void* data, std::size_t bytes, uint64_t offset, const std::filesystem::path& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    TRIPOD_CHECK(n > 0, "cannot read ", path.string(), " at byte ", offset, ": ",
                 n < 0 ? last_system_error() : std::string("the file ends there (truncated?)"));
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

void write_text_durably(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TRIPOD_CHECK(fd >= 0, "cannot create ", tmp.string(), ": ", last_system_error());
  try {
    write_fully(fd, text.data(), text.size(), tmp);
    TRIPOD_CHECK(::fsync(fd) == 0, "fsync of ", tmp.string(), " failed: ", last_system_error());
  } catch (...) {
    ::close(fd);
    std::filesystem::remove(tmp);
    throw;
  }
  TRIPOD_CHECK(::close(fd) == 0, "closing ", tmp.string(), " failed: ", last_system_error());
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  TRIPOD_CHECK(!ec, "cannot rename ", tmp.string(), " to ", path.string(), ": ", ec.message());
  fsync_directory(path.parent_path());
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  TRIPOD_CHECK(in.good(), "cannot read ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tripod::ckpt
