// What this program was built from and how: `tripod --version`, and the results files that must
// say which build produced their figures (a benchmark compared across commits, a regression
// bisected). The commit is read at every build (core/build_commit.cmake), so it follows commits
// without a reconfigure.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tripod {

struct BuildInfo {
  std::string version;       // the project's, "0.1.0"
  std::string commit;        // 12 hex digits of HEAD, or "unknown" outside a git checkout
  std::string commit_state;  // "clean", "modified" (tracked files differed from HEAD), "unknown"
  std::string build_type;    // "Release", ...
  std::string compiler;      // "GCC 14.2.0"
  std::string march;         // -march of the CPU kernels: "native", "x86-64-v3"
};

const BuildInfo& build_info();

// "0.1.0 (commit 43e88ec1a2b3; Release, GCC 14.2.0, -march=native)"; "+modified" after the
// commit when the tree differed from it.
std::string build_info_text();

// The same as a results file's "build" object: {"version", "commit", "commit_state",
// "build_type", "compiler", "march"}.
nlohmann::json build_info_json();

}  // namespace tripod
