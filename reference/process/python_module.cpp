#include "process/python_module.h"

#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "process/child_process.h"

namespace fs = std::filesystem;

namespace tripod::process {

int run_python_module(const std::string& python, const std::string& module, const std::vector<std::string>& args) {
  const fs::path source = TRIPOD_SOURCE_DIR;
  // reports.golden.check -> reports/golden/check.py, or reports/importers/__main__.py for a package
  std::string relative = module;
  for (char& c : relative) c = c == '.' ? '/' : c;
  const bool found = fs::exists(source / (relative + ".py")) || fs::exists(source / relative / "__main__.py");
  check(found, "the Python module ", module, " is missing from ", source.string(), " (TRIPOD_SOURCE_DIR moved?)");
  if (::access(python.c_str(), X_OK) != 0)
    fail("cannot run ", module, ": the Python interpreter ", python,
         " is not an executable file (--python; Debian's /usr/bin/python3 after ci/setup.sh)");
  std::vector<std::string> argv = {"-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  const ChildExit exit = run_foreground(python, argv, {{"PYTHONPATH", source.string()}});
  check(!exit.signaled, python, " -m ", module, " ", describe_exit(exit));
  return exit.code;
}

}  // namespace tripod::process
