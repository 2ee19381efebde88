#include "comm/rank_errors.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace tripod {
namespace {
void report(const Communicator& world, const Error& e) {
  std::fprintf(stderr, "tripod: error: %s%s\n", rank_prefix(world).c_str(), e.what());
  std::fflush(stderr);
}
}  // namespace

std::string rank_prefix(const Communicator& world) {
  return "rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) + ": ";
}

void check_on_every_rank(Communicator& world, const std::function<void()>& checks) {
  try {
    checks();
  } catch (const Error& e) {
    if (*e.what() == '\0') throw;  // reported already
    report(world, e);
    world.barrier();
    throw Error("");
  }
}

void run_or_abort_job(Communicator& world, const std::function<void()>& work) {
  try {
    work();
  } catch (const Error& e) {
    if (*e.what() != '\0') report(world, e);
    if (world.size() > 1) abort_job(1);
    throw Error("");  // one rank: already reported; the program exits 1
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
