// check() and TRIPOD_CHECK (core/error.h): the macro evaluates its message parts only when the
// condition fails, so a part may dereference what the condition guards.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace tripod {
namespace {

std::string counted_part(int* calls) {
  ++*calls;
  return "part";
}

TEST(ErrorCheck, MessagePartsAreEvaluatedOnlyOnFailure) {
  int calls = 0;
  TRIPOD_CHECK(true, "never ", counted_part(&calls));
  EXPECT_EQ(calls, 0);
  EXPECT_THROW(TRIPOD_CHECK(false, "always ", counted_part(&calls)), Error);
  EXPECT_EQ(calls, 1);
  // check(), a function, evaluates them first whatever the condition: why the macro exists.
  check(true, "evaluated ", counted_part(&calls));
  EXPECT_EQ(calls, 2);
}

TEST(ErrorCheck, APartMayDereferenceWhatTheConditionGuards) {
  // The first GPU run's crash: a null C-input described in the message of a check that held.
  const Tensor* c_in = nullptr;
  const bool in_place = true;
  EXPECT_NO_THROW(TRIPOD_CHECK(c_in == nullptr || in_place, "C input ", c_in->describe(), " is not C"));
}

TEST(ErrorCheck, FailureMessageConcatenatesTheParts) {
  try {
    TRIPOD_CHECK(1 + 1 == 3, "rank ", 3, ": tensor '", std::string("wte"), "' is ", 2.5, " MiB");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 3: tensor 'wte' is 2.5 MiB");
  }
}

TEST(ErrorCheck, IsOneStatementInAnUnbracedIfElse) {
  int branch = 0;
  if (branch == 0)
    TRIPOD_CHECK(true, "x");
  else
    branch = 2;
  EXPECT_EQ(branch, 0);
}

}  // namespace
}  // namespace tripod
