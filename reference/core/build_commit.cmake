# Run at every build (cmake -P, from reference/CMakeLists.txt): writes OUTPUT, a header naming the
# commit the sources were built from and whether tracked files differed from it. A configure-time
# value would go stale with the next commit, which reruns no configure. The header is rewritten
# only when its text changes, so an unchanged commit rebuilds nothing.
set(commit "unknown")
set(state "unknown")  # not a git checkout (a source tarball), or git missing
find_program(GIT git)
if(GIT AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE head_result ERROR_QUIET)
  if(head_result EQUAL 0)
    set(commit "${head}")
    # Exit 1: tracked files differ from HEAD (untracked ones are not counted: build outputs, runs).
    execute_process(COMMAND "${GIT}" -C "${SOURCE_DIR}" diff --quiet HEAD --
                    RESULT_VARIABLE diff_result ERROR_QUIET)
    if(diff_result EQUAL 0)
      set(state "clean")
    elseif(diff_result EQUAL 1)
      set(state "modified")
    endif()
  endif()
endif()
set(text "// Written by reference/core/build_commit.cmake at build time; do not edit.\n#define TRIPOD_COMMIT \"${commit}\"\n#define TRIPOD_COMMIT_STATE \"${state}\"\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
