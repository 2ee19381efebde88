// The NCCL communicator's failure path on a real GPU, at world size 1: a receive that no send
// will ever serve ends in the timeout error (not a hang), the communicator is aborted, and a later
// operation on it is refused with that reason instead of handing NCCL a freed handle. Skipped,
// with the reason, where there is no GPU or no NCCL.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "comm/comm_watchdog.h"
#include "comm/mpi_communicator.h"
#include "comm/world.h"
#include "core/error.h"
#include "support/error_text.h"

namespace tripod {
namespace {

TEST(NcclCommunicator, AFailedOperationAbortsAndLaterOnesAreRefused) {
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL communicator";
  std::unique_ptr<Backend> backend;
  try {
    backend = make_backend("cuda");
  } catch (const Error& e) {
    GTEST_SKIP() << "no GPU: " << e.what();
  }
  static MpiRuntime mpi;  // a singleton MPI world for the communicator's host side; finalised at exit
  CommSettings settings;
  settings.kind = "nccl";
  std::unique_ptr<Communicator> world = make_world(*backend, settings);
  ASSERT_EQ(world->size(), 1);
  // The short timeout only after the communicator's start-up (ncclCommInitRank under the default
  // timeout: on a node with many network cards it may take seconds, and the watchdog would end the
  // whole test binary); restored after, for the tests that follow in the same process.
  const double default_timeout = comm_timeout_seconds();
  set_comm_timeout(3);
  struct Restore {
    double seconds;
    ~Restore() { set_comm_timeout(seconds); }
  } restore{default_timeout};
  const Tensor t = backend->alloc({4}, DType::F32);
  // No send will come: NCCL either refuses the lonely self-receive at once or it waits until the
  // timeout; both must end in an error that says the communicator was aborted.
  const std::string first = error_of([&] { world->recv(t, 0, 0); });
  EXPECT_NE(first.find("the NCCL communicator was aborted"), std::string::npos) << first;
  // Later operations on an aborted communicator are refused by name. (The receive ran on the
  // per-sender communicator; the group's own collectives still work, so try another receive.)
  const std::string second = error_of([&] { world->recv(t, 0, 0); });
  EXPECT_NE(second.find("aborted after an earlier failure"), std::string::npos) << second;
}

}  // namespace
}  // namespace tripod
