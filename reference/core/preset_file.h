// Files named on the command line either by path or as a preset of the source tree (`--config tiny`,
// `tripod scale run quick`): one lookup, so that both say the same thing about a bad name.
#pragma once
#include <filesystem>
#include <string>

namespace tripod {

// `name_or_path` if it is a file; else the preset `preset_dir/NAME[.json]` under the working
// directory or the source tree. An Error (`what` names the kind of file) when it is neither, or
// when the name is a directory: reading a directory as a stream fails later with a message that
// names nothing.
std::filesystem::path resolve_preset_file(const std::string& name_or_path, const std::string& preset_dir,
                                          const std::string& what);

}  // namespace tripod
