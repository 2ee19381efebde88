// The message of the tripod::Error a callable throws, for tests that check what an error names.
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace tripod::testing {

// What `f` threw as tripod::Error, or "no error" when it returned normally.
inline std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace tripod::testing
