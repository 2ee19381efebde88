// Errors: every failure Tripod reports is a tripod::Error whose message names what is wrong
// (the file, tensor, rank or step); the CLI prints it and exits non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tripod {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A failure already reported (by a Python checker the command ran, say) whose exit status the
// program must keep: `golden check` documents 1 for DIFFERS and 2 for unreadable results.
class ReportedFailure : public Error {
 public:
  explicit ReportedFailure(int exit_status) : Error(""), exit_status(exit_status) {}
  int exit_status;
};

template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(str_cat(parts...));
}

// "a, b, c and 49 more (52 in all)": names in a message, the first `shown` of them, so that an
// error about every tensor of a model stays one readable line.
inline std::string name_list(const std::vector<std::string>& names, std::size_t shown = 8) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  if (names.size() > shown) out += str_cat(" and ", names.size() - shown, " more (", names.size(), " in all)");
  return out;
}

// check(condition, "message parts", ...): throws tripod::Error with the concatenated message.
// A function evaluates its arguments before it runs, so the parts must be values that cost
// nothing and are always safe to compute: literals, numbers, names held in variables.
template <typename... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

// TRIPOD_CHECK(condition, "message parts", ...): check() for parts that compute something
// (t.describe(), shape_str(...), p->member): they are evaluated only when the condition fails.
// With check() a part `c_in->describe()` ran on every call and crashed where `c_in` was null
// and the condition held (every fp32 GEMM of the bf16-operand policy, on the first GPU run);
// describe() on a hot path also formats a string per call for nothing. ci/lint/eager_messages.py
// refuses a check() whose parts compute.
#define TRIPOD_CHECK(condition, ...)          \
  do {                                        \
    if (!(condition)) ::tripod::fail(__VA_ARGS__); \
  } while (false)

}  // namespace tripod
