#include "core/preset_file.h"

#include "core/error.h"

namespace tripod {

namespace fs = std::filesystem;

fs::path resolve_preset_file(const std::string& name_or_path, const std::string& preset_dir, const std::string& what) {
  check(!name_or_path.empty(), "an empty ", what, " name");
  if (fs::is_directory(name_or_path))
    fail(what, " '", name_or_path, "' is a directory, not a JSON file");
  if (fs::exists(name_or_path)) return name_or_path;
  for (const fs::path& dir : {fs::path(preset_dir), fs::path(TRIPOD_SOURCE_DIR) / preset_dir})
    for (const char* ext : {".json", ""})
      if (fs::is_regular_file(dir / (name_or_path + ext))) return dir / (name_or_path + ext);
  fail(what, " '", name_or_path, "' is neither a file nor a preset in ", preset_dir, "/");
}

}  // namespace tripod
