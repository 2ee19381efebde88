#include "train/fault_injection.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tripod {
namespace {

struct ArmedFault {
  bool armed = false;
  FaultPoint point = FaultPoint::StepStart;
  int rank = 0;
  int64_t step = 0;
};
ArmedFault fault;

}  // namespace

void arm_fault_injection(bool resumed) {
  fault = ArmedFault{};
  const char* value = std::getenv("TRIPOD_FAULT");
  if (!value || !*value) return;
  const std::string text = value;
  const auto first = text.find(':'), second = text.find(':', first == std::string::npos ? first : first + 1);
  const std::string kind = text.substr(0, first);
  ArmedFault f;
  try {
    check(first != std::string::npos && second != std::string::npos, "");
    f.rank = std::stoi(text.substr(first + 1, second - first - 1));
    f.step = std::stoll(text.substr(second + 1));
  } catch (...) {
    fail("TRIPOD_FAULT='", text, "': expected kill:RANK:STEP or kill-in-save:RANK:STEP");
  }
  check(kind == "kill" || kind == "kill-in-save", "TRIPOD_FAULT='", text,
        "': unknown fault '", kind, "' (expected kill or kill-in-save)");
  check(f.rank >= 0 && f.step >= 1, "TRIPOD_FAULT='", text, "': the rank must be >= 0 and the step >= 1");
  f.point = kind == "kill" ? FaultPoint::StepStart : FaultPoint::DuringSave;
  f.armed = !resumed;
  fault = f;
}

void maybe_inject_fault(FaultPoint point, int world_rank, int64_t step) {
  if (!fault.armed || fault.point != point || fault.rank != world_rank || fault.step != step) return;
  std::fprintf(stderr, "tripod: TRIPOD_FAULT: rank %d kills itself %s step %lld\n", world_rank,
               point == FaultPoint::StepStart ? "at the start of" : "in the save after", static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace tripod
