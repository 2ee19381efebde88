#include "comm/rank_errors.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "comm/host_collectives.h"
#include "core/error.h"

namespace tripod {
namespace {
// "tripod: error: rank r of n: ..." (or "internal error").
void report(const Communicator& world, const char* message, const char* kind = "error") {
  std::fprintf(stderr, "tripod: %s: %s%s\n", kind, rank_prefix(world).c_str(), message);
  std::fflush(stderr);
}
}  // namespace

std::string rank_prefix(const Communicator& world) {
  return "rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) + ": ";
}

void check_on_every_rank(Communicator& world, const std::function<void()>& checks) {
  bool failed = false;
  try {
    checks();
  } catch (const Error& e) {
    if (*e.what() == '\0') throw;  // reported already
    report(world, e.what());
    failed = true;
  } catch (const std::exception& e) {  // any other (a filesystem_error): reported, and agreed on too
    report(world, e.what());
    failed = true;
  }
  // Every rank learns whether any failed (and waits for its report): a barrier on the failing ranks
  // alone let the others go on into collectives of their own, and the job hung until the watchdog
  // (a memory check that passed on one node and not on another).
  if (all_reduce_value(world, failed ? 1.0 : 0.0, ReduceOp::Max) != 0) throw Error("");
}

void run_or_abort_job(Communicator& world, const std::function<void()>& work) {
  try {
    work();
  } catch (const Error& e) {
    if (*e.what() != '\0') report(world, e.what());
    if (world.size() > 1) abort_job(1);
    throw Error("");  // one rank: already reported; the program exits 1
  } catch (const std::exception& e) {
    // Anything else (std::bad_alloc, a filesystem_error) unwound to main through ~MpiRuntime, whose
    // MPI_Finalize waited for ranks that waited in a collective for this one: the job hung for
    // --comm-timeout and this rank's error was never printed. One rank: main reports it.
    if (world.size() == 1) throw;
    const bool input = dynamic_cast<const std::filesystem::filesystem_error*>(&e) != nullptr;  // as main says
    report(world, e.what(), input ? "error" : "internal error");
    abort_job(input ? 1 : 2);
  }
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace tripod
