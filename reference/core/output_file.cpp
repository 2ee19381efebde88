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

void write_output_file(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  check(out.good(), "cannot write ", what, " ", path, ": ", std::strerror(errno));
  out << text;
  out.flush();
  check(out.good(), "writing ", what, " ", path, " failed: ", std::strerror(errno));
}

}  // namespace tripod
