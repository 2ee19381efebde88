// The Python side of the tripod program (fits, reports, importers, the golden check) lives in the
// source tree's packages (scaling/, reports/) and runs as modules of Debian's interpreter, which
// has numpy, scipy and matplotlib. One function so that every command finds them the same way.
#pragma once
#include <string>
#include <vector>

namespace tripod::process {

// Runs `python -m module args...` in the foreground with PYTHONPATH at the source tree; returns
// its exit status. Throws tripod::Error naming the module when its file is missing from the source
// tree (TRIPOD_SOURCE_DIR moved) or when it is killed by a signal.
int run_python_module(const std::string& python, const std::string& module, const std::vector<std::string>& args);

// The same for a module whose result is a file: an exit status of 0 counts only if the module
// (re)wrote `output` during the run; else it throws, naming the interpreter and the file. Exit 0
// alone is not a result: a --python that is not an interpreter with the module (/bin/true), or a
// wrapper that swallows its failure, would have passed for a finished fit, report or check.
int run_python_module_writing(const std::string& python, const std::string& module,
                              const std::vector<std::string>& args, const std::string& output);

// Debian's interpreter: the one the packages are tested with (ci/setup.sh installs its modules).
inline const char* default_python() { return "/usr/bin/python3"; }

}  // namespace tripod::process
