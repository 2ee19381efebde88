// Argument errors are found locally, before MPI is called, with messages that name the operation,
// the group, the rank and the sizes. Every rank makes the same bad call, so every rank throws and a
// barrier afterwards proves nobody was left inside a collective.
#include <gtest/gtest.h>

#include "comm/rank_errors.h"
#include "support/test_backend.h"
#include "mpi_test_util.h"

namespace tripod::testing {
namespace {

// Runs `call`, expecting a tripod::Error whose message contains every one of `parts`.
template <typename Call>
void expect_error(Call call, const std::vector<std::string>& parts) {
  try {
    call();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "missing '" << part << "' in: " << e.what();
  }
}

class CommErrors : public ::testing::Test {
 protected:
  void TearDown() override { world->barrier(); }
  std::unique_ptr<Communicator> world = testing::test_world();
  int n = world->size();
  int r = world->rank();
  std::string where(const std::string& op) const { return str_cat(op, " on mpi:world (rank ", r, " of ", n, ")"); }
};

// A check that fails on one rank only (a memory check on one node) ends every rank: the failing
// ranks waited at a barrier while the others went on into collectives of their own, and the job
// hung until the watchdog.
TEST_F(CommErrors, ACheckThatFailsOnOneRankEndsEveryRank) {
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(check_on_every_rank(*world, [&] { check(r != n - 1, "only the last rank fails"); }), Error);
  const std::string reported = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(reported.find("only the last rank fails") != std::string::npos, r == n - 1) << reported;
  // A check that passes everywhere returns on every rank.
  EXPECT_NO_THROW(check_on_every_rank(*world, [] {}));
}

TEST_F(CommErrors, SizeMismatchesNameOpRankAndSizes) {
  expect_error([&] { world->all_reduce(host_tensor(7, DType::F32), host_tensor(8, DType::F32), ReduceOp::Sum); },
               {where("all_reduce"), "in has 7 fp32 elements but out has 8"});
  expect_error([&] { world->reduce_scatter(host_tensor(n * 3 + 1, DType::F64), host_tensor(3, DType::F64), ReduceOp::Sum); },
               {where("reduce_scatter"), str_cat("in has ", n * 3 + 1, " fp64 elements but needs size ", n)});
  expect_error([&] { world->all_gather_async(host_tensor(2, DType::I32), host_tensor(2 * n + 1, DType::I32)); },
               {where("all_gather"), str_cat("out has ", 2 * n + 1, " int32 elements")});
  if (n > 1) {  // any count splits into one block
    expect_error([&] { world->all_to_all(host_tensor(n * 2 + 1, DType::F32), host_tensor(n * 2 + 1, DType::F32)); },
                 {where("all_to_all"), str_cat("do not split into ", n, " equal blocks")});
  }
}

// An error thrown while an operation is in flight (a layout's bug after a TP all-reduce started)
// leaves the operation to MPI: its buffers and its communicator stay, so that the collectives after
// it run (conform reports the row's error and goes on to its next layout) instead of faulting in
// MPI's progress of the abandoned one (a SIGSEGV in Open MPI's isend, found 2026-12-06).
TEST_F(CommErrors, AnOperationAnErrorLeftInFlightDoesNotBreakTheCollectivesAfterIt) {
  for (int round = 0; round < 3; ++round) {
    try {
      std::unique_ptr<Communicator> group = world->split(0, r, "abandoned");
      Tensor t = host_tensor(1 << 18, DType::F32);  // 1 MiB, in place
      std::unique_ptr<CommRequest> pending = group->all_reduce_async(t, t, ReduceOp::Sum);
      throw Error("a layout's bug");  // unwinds past the request, then the group
    } catch (const Error&) {
    }
  }
  Tensor x = host_tensor(1 << 18, DType::F32);
  world->all_reduce_async(x, x, ReduceOp::Sum)->wait();
  world->all_reduce(x, x, ReduceOp::Max);
}

TEST_F(CommErrors, DtypeProblems) {
  expect_error([&] { world->all_reduce(host_tensor(4, DType::F32), host_tensor(4, DType::F64), ReduceOp::Sum); },
               {where("all_reduce"), "in has dtype fp32 but out has fp64"});
  expect_error([&] { world->reduce(host_tensor(4, DType::I32), host_tensor(4, DType::I32), ReduceOp::Avg, 0); },
               {where("reduce"), "avg needs a floating dtype, got int32"});
}

TEST_F(CommErrors, RanksTagsAndOverlap) {
  Tensor t = host_tensor(2 * n + 8, DType::F32);
  expect_error([&] { world->broadcast(t, n); }, {where("broadcast"), str_cat("root ", n, " is not a rank")});
  expect_error([&] { world->send_async(t, -1, 0); }, {where("send"), "peer -1"});
  expect_error([&] { world->recv_async(t, 0, 40000); }, {where("recv"), "tag 40000"});
  expect_error([&] { world->all_reduce(t.view(0, {4}), t.view(2, {4}), ReduceOp::Sum); },
               {where("all_reduce"), "partly overlap"});
  // all_gather's input may be out's own block only, not straddle two blocks.
  expect_error([&] { world->all_gather(t.view(2 * r + 1, {2}), t.view(0, {2 * n})); },
               {where("all_gather"), str_cat("is not out's block ", r)});
  expect_error([&] { world->all_reduce(Tensor(), Tensor(), ReduceOp::Sum); }, {where("all_reduce"), "undefined"});
}

TEST_F(CommErrors, DeviceTensorsAreRefused) {
  // Storage that claims to be on a GPU: the MPI backend must refuse it without touching it.
  static char fake[64];
  Tensor gpu(std::make_shared<Storage>(fake, sizeof fake, Device::Cuda, nullptr), 0, Shape{4}, DType::F32);
  expect_error([&] { world->all_reduce(gpu, gpu, ReduceOp::Sum); },
               {where("all_reduce"), "cannot move a fp32 [4] on the cuda tensor"});
  SelfCommunicator self;
  expect_error([&] { self.broadcast(gpu, 0); }, {"broadcast on self (rank 0 of 1)", "cannot move a fp32 [4] on the cuda"});
  // The MPI communicator itself takes host memory only: an emulated device's tensor is refused too
  // (it must come through a StagedCommunicator, as a GPU's would).
  std::unique_ptr<Communicator> plain = mpi_world();
  Tensor emulated(std::make_shared<Storage>(fake, sizeof fake, Device::Emulated, nullptr), 0, Shape{4}, DType::F32);
  expect_error([&] { plain->all_reduce(emulated, emulated, ReduceOp::Sum); },
               {"all_reduce on mpi:world", "cannot move a fp32 [4] on the emulated device tensor"});
}

}  // namespace
}  // namespace tripod::testing
