// Result files named on the command line (--json, --out, --junit, ...). A results file that was
// asked for and not written is a failure, never a silent exit 0, and the check comes before the
// work where it can, so that a typo in a path does not cost a whole benchmark.
#pragma once
#include <string>

namespace tripod {

// `path` can be created or replaced: its folder exists and is writable, and it is not a folder.
// An Error naming `option`, the path and the reason otherwise. An empty path is not checked
// (the option was not given).
void check_output_path(const std::string& path, const std::string& option);

// Writes `text` to `path`, replacing it whole (a staging file renamed over it: the previous file
// stays when the write fails); an Error naming `what`, the path and the reason if the file cannot
// be opened or a byte of it did not reach the file.
void write_output_file(const std::string& path, const std::string& text, const std::string& what);

}  // namespace tripod
