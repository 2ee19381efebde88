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
  TRIPOD_CHECK(found, "the Python module ", module, " is missing from ", source.string(),
               " (TRIPOD_SOURCE_DIR moved?)");
  if (::access(python.c_str(), X_OK) != 0)
    fail("cannot run ", module, ": the Python interpreter ", python,
         " is not an executable file (--python; Debian's /usr/bin/python3 after ci/setup.sh)");
  std::vector<std::string> argv = {"-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  // PYTHONSAFEPATH (Python 3.11+): `-m` puts the working directory first on the path, so a folder
  // `scaling/` or `reports/` where the command was started ran in place of the source tree's.
  const ChildExit exit = run_foreground(python, argv, {{"PYTHONPATH", source.string()}, {"PYTHONSAFEPATH", "1"}});
  check(!exit.signaled, python, " -m ", module, " ", describe_exit(exit));
  return exit.code;
}

int run_python_module_writing(const std::string& python, const std::string& module,
                              const std::vector<std::string>& args, const std::string& output) {
  std::error_code ec;
  const fs::file_time_type before = fs::exists(output, ec) ? fs::last_write_time(output, ec) : fs::file_time_type::min();
  const int code = run_python_module(python, module, args);
  if (code != 0) return code;
  check(fs::exists(output, ec) && fs::last_write_time(output, ec) > before, python, " exited 0 without writing ",
        output, " (it was to run -m ", module, ": is --python a Python that runs Tripod's modules?)");
  return code;
}

}  // namespace tripod::process
