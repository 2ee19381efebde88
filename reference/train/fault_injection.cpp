#include "train/fault_injection.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>

#include "core/error.h"

namespace tripod {
namespace {

struct ArmedFault {
  bool armed = false;
  FaultPoint point = FaultPoint::StepStart;
  int rank = 0;
  int64_t step = 0;
  bool nan = false;        // a loss fault: NaN, else a spike
  int64_t delay_ms = 0;    // slow-snapshot
  int signal = SIGKILL;    // kill, kill-in-save: SIGKILL; segv: SIGSEGV
  bool bad_alloc = false;  // bad-alloc: throws std::bad_alloc instead of a signal
};
ArmedFault fault;

void check_reachable(const std::string& text, const ArmedFault& f, const FaultReach& reach) {
  const std::string never = "TRIPOD_FAULT='" + text + "' would never fire: ";
  if (f.point == FaultPoint::Snapshot) {
    check(reach.background_saves, never, "slow-snapshot delays background saves, and this run makes none ",
          "(it needs train.async_save=true and --save with train.save_every or --save-local)");
    return;
  }
  if (f.point == FaultPoint::StepStart || f.point == FaultPoint::DuringSave || f.point == FaultPoint::Update)
    check(f.rank < reach.world_size, never, "the run has ", reach.world_size, " rank", reach.world_size == 1 ? "" : "s",
          ", no rank ", f.rank);
  check(f.step <= reach.last_step, never, "the run ends at step ", reach.last_step, " (train.steps), before step ",
        f.step);
  if (f.point == FaultPoint::DuringSave)
    check(reach.saves_after && reach.saves_after(f.step), never, "the run saves no checkpoint after step ", f.step,
          " (saves follow every train.save_every / train.local_save_every steps and the last one, under --save)");
}

}  // namespace

void arm_fault_injection(bool resumed, const FaultReach& reach) {
  fault = ArmedFault{};
  const char* value = std::getenv("TRIPOD_FAULT");
  if (!value || !*value) return;
  const std::string text = value;
  const auto first = text.find(':');
  const std::string kind = text.substr(0, first);
  ArmedFault f;
  const bool loss_fault = kind == "nan-loss" || kind == "spike-loss", slow = kind == "slow-snapshot";
  check(kind == "kill" || kind == "segv" || kind == "bad-alloc" || kind == "kill-in-save" || kind == "inf-update" ||
            loss_fault || slow,
        "TRIPOD_FAULT='", text, "': unknown fault '", kind,
        "' (expected kill, segv, bad-alloc, kill-in-save, inf-update, nan-loss, spike-loss or slow-snapshot)");
  // Whole numbers only: std::stoll read "3x" as 3, " 3" as 3 and "1e3" as 1.
  const auto whole = [](const std::string& part) {
    int64_t n = 0;
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), n);
    check(error == std::errc() && end == part.data() + part.size() && !part.empty(), "");
    return n;
  };
  try {
    check(first != std::string::npos, "");
    if (slow) {
      f.delay_ms = whole(text.substr(first + 1));
      f.step = 1;  // every save
    } else if (loss_fault) {
      f.step = whole(text.substr(first + 1));
    } else {
      const auto second = text.find(':', first + 1);
      check(second != std::string::npos, "");
      const int64_t rank = whole(text.substr(first + 1, second - first - 1));
      check(rank <= (1 << 24), "");
      f.rank = static_cast<int>(rank);
      f.step = whole(text.substr(second + 1));
    }
  } catch (...) {
    fail("TRIPOD_FAULT='", text, "': expected kill:RANK:STEP, segv:RANK:STEP, bad-alloc:RANK:STEP, kill-in-save:RANK:STEP, "
         "inf-update:RANK:STEP, nan-loss:STEP, spike-loss:STEP or slow-snapshot:MS");
  }
  check(f.rank >= 0 && f.step >= 1 && f.delay_ms >= 0, "TRIPOD_FAULT='", text,
        "': the rank must be >= 0, the step >= 1 and the delay >= 0");
  f.point = kind == "kill" || kind == "segv" || kind == "bad-alloc" ? FaultPoint::StepStart
            : kind == "kill-in-save" ? FaultPoint::DuringSave
            : kind == "inf-update"   ? FaultPoint::Update
            : slow                   ? FaultPoint::Snapshot
                                     : FaultPoint::Loss;
  f.nan = kind == "nan-loss";
  f.signal = kind == "segv" ? SIGSEGV : SIGKILL;
  f.bad_alloc = kind == "bad-alloc";
  f.armed = !resumed;
  if (f.armed) check_reachable(text, f, reach);
  fault = f;
}

void maybe_inject_fault(FaultPoint point, int world_rank, int64_t step) {
  if (!fault.armed || fault.point != point || fault.rank != world_rank || fault.step != step) return;
  std::fprintf(stderr, "tripod: TRIPOD_FAULT: rank %d %s %s step %lld\n", world_rank,
               fault.bad_alloc ? "throws std::bad_alloc" : fault.signal == SIGSEGV ? "raises SIGSEGV" : "kills itself",
               point == FaultPoint::StepStart ? "at the start of" : "in the save after", static_cast<long long>(step));
  std::fflush(stderr);
  // SIGSEGV goes through the crash report's handler (core/crash_report.h), which prints the stack
  // and dies of the signal: a crash in Tripod's own code, where the stack unwinds to main.
  if (fault.bad_alloc) throw std::bad_alloc();
  std::raise(fault.signal);
}

double maybe_inject_loss_fault(int64_t step, double loss) {
  if (!fault.armed || fault.point != FaultPoint::Loss || fault.step != step) return loss;
  fault.armed = false;  // once: a rolled-back run takes step S again
  return fault.nan ? std::nan("") : 10 * loss;
}

bool maybe_inject_update_fault(int world_rank, int64_t step) {
  if (!fault.armed || fault.point != FaultPoint::Update || fault.rank != world_rank || fault.step != step) return false;
  fault.armed = false;  // once, as the loss faults
  std::fprintf(stderr, "tripod: TRIPOD_FAULT: rank %d's update at step %lld leaves a parameter infinite\n", world_rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  return true;
}

void maybe_delay_snapshot() {
  if (fault.armed && fault.point == FaultPoint::Snapshot)
    std::this_thread::sleep_for(std::chrono::milliseconds(fault.delay_ms));
}

}  // namespace tripod
