// What a call throws, for tests that check that an error's message names the file, tensor, rank
// or step.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>

#include "core/error.h"

namespace tripod {

// The message of the tripod::Error that `body` throws, or "no error" when it returns.
inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The message of the tripod::Error that `body` must throw; returning, or throwing anything else,
// fails the test.
inline std::string expected_error(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a tripod::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a tripod::Error, got none";
  return "";
}

}  // namespace tripod
