#include "core/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tripod {

namespace fs = std::filesystem;

void check_output_path(const std::string& path, const std::string& option) {
  if (path.empty()) return;
  std::error_code ec;
  check(!fs::is_directory(path, ec), option, " ", path, ": is a directory, not a file name");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  TRIPOD_CHECK(fs::is_directory(parent, ec), option, " ", path, ": the folder ", parent.string(), " does not exist");
  TRIPOD_CHECK(::access(parent.c_str(), W_OK) == 0, option, " ", path, ": the folder ", parent.string(),
               " is not writable (", std::strerror(errno), ")");
}

// Written under a name of this process's beside `path` and renamed over it: a kill, a full disk or a
// second writer mid-write (another rank writing the same report after a lone failure) never leaves
// half a file where the previous results were; a reader meets the old file or the whole new one. A
// path that is not a plain regular file (/dev/stdout, a pipe, /dev/full, a symbolic link) is
// written in place, as given.
void write_output_file(const std::string& path, const std::string& text, const std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  const bool in_place = fs::exists(status) && !fs::is_regular_file(status);
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  const std::string written = in_place ? path : path + ".tmp-" + host + "-" + std::to_string(::getpid());
  {
    std::ofstream out(written, std::ios::binary | std::ios::trunc);
    check(out.good(), "cannot write ", what, " ", path, ": ", std::strerror(errno));
    out << text;
    out.flush();
    if (!out.good()) {
      const int error = errno;
      out.close();
      if (!in_place) fs::remove(written, ec);  // no half-written staging file left behind
      fail("writing ", what, " ", path, " failed: ", std::strerror(error));
    }
  }
  if (in_place) return;
  fs::rename(written, path, ec);
  if (!ec) return;
  std::error_code ignored;
  fs::remove(written, ignored);
  fail("cannot write ", what, " ", path, ": ", ec.message());
}

}  // namespace tripod
