#include "core/build_info.h"

#include "build_commit.h"  // generated in the build tree: TRIPOD_COMMIT, TRIPOD_COMMIT_STATE

namespace tripod {
namespace {

std::string compiler_text() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown compiler";
#endif
}

}  // namespace

const BuildInfo& build_info() {
  static const BuildInfo info{TRIPOD_VERSION,    TRIPOD_COMMIT,  TRIPOD_COMMIT_STATE,
                              TRIPOD_BUILD_TYPE, compiler_text(), TRIPOD_BUILD_MARCH};
  return info;
}

std::string build_info_text() {
  const BuildInfo& b = build_info();
  return b.version + " (commit " + b.commit + (b.commit_state == "modified" ? "+modified" : "") + "; " +
         (b.build_type.empty() ? "no build type" : b.build_type) + ", " + b.compiler + ", -march=" + b.march + ")";
}

nlohmann::json build_info_json() {
  const BuildInfo& b = build_info();
  return {{"version", b.version},       {"commit", b.commit},     {"commit_state", b.commit_state},
          {"build_type", b.build_type}, {"compiler", b.compiler}, {"march", b.march}};
}

}  // namespace tripod
