// Entry point of the multi-rank suites: every rank runs every test (collectives need all members),
// rank 0 prints GoogleTest's report, other ranks print only their failures, and the exit code is
// non-zero on every rank if any rank failed anything. The bookkeeping uses raw MPI on
// MPI_COMM_WORLD, not the Communicator under test, so a broken Communicator cannot hide failures.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/blas_kernels.h"
#include "comm/core_sharing.h"
#include "comm/mpi_communicator.h"
#include "process/load_time_settings.h"

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// On ranks other than 0: print failed assertions, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

// After each test, every rank learns which ranks failed it; rank 0 names them, because its own
// report says "OK" for a test that failed only elsewhere.
class RankAgreement : public ::testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const ::testing::TestInfo& info) override {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int failed = info.result()->Failed() ? 1 : 0;
    std::vector<int> all(static_cast<std::size_t>(size));
    MPI_Allgather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::string ranks;
    for (int r = 0; r < size; ++r) {
      if (!all[r]) continue;
      if (!ranks.empty()) ranks += ',';
      ranks += std::to_string(r);
    }
    if (world_rank() == 0 && !ranks.empty()) {
      std::printf("[  RANKS   ] %s.%s failed on ranks %s\n", info.test_suite_name(), info.name(), ranks.c_str());
      std::fflush(stdout);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  tripod::execute_again_with(tripod::cpu::openblas_kernel_settings(), argv);  // as tripod does, before MPI starts
  tripod::MpiRuntime mpi(&argc, &argv);
  {  // as the tripod binary does: more ranks than cores must not spin in OpenMP's barriers
    tripod::MpiCommunicator world(MPI_COMM_WORLD, "world");
    tripod::share_cores(world);
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = world_rank();
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  listeners.Append(new RankAgreement);

  const int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_anywhere = 0;
  MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed_anywhere && !failed_here) std::printf("FAILED: tests failed on other ranks (see above)\n");
  return failed_anywhere;
}
