// The process's environment as the host-side choices (device_choice.h, attention_choice.h,
// fusion_choice.h) read it: each takes `env` as a function, so that their tests pass their own.
#pragma once
#include <cstdlib>
#include <string>

namespace tripod::cuda {

// The variable's value, "" when it is unset.
inline std::string process_env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace tripod::cuda
