// What only the SelfCommunicator does: its mailbox for send/recv to itself (either order, tags,
// errors instead of hangs) and its splits. Its collectives run in the shared suites (group "self").
#include <gtest/gtest.h>

#include "mpi_test_util.h"

namespace tripod::testing {
namespace {

TEST(SelfCommunicator, SendAndRecvInEitherOrder) {
  SelfCommunicator self;
  Tensor a = host_tensor(7, DType::F32), b = host_tensor(7, DType::F32);
  fill(a, [](int64_t i) { return i + 0.5; });
  auto recv = self.recv_async(b, 0, 4);  // posted first
  EXPECT_FALSE(recv->test());
  self.send(a, 0, 4);
  EXPECT_TRUE(recv->test());
  EXPECT_EQ(mismatches(b, [](int64_t i) { return i + 0.5; }), "");

  fill(a, [](int64_t i) { return -i; });
  self.send(a, 0, 5);  // buffered: the sender may reuse its tensor at once
  fill(a, [](int64_t) { return 99; });
  self.recv(b, 0, 5);
  EXPECT_EQ(mismatches(b, [](int64_t i) { return -i; }), "");
}

TEST(SelfCommunicator, UnmatchedOrMismatchedRecvThrowsInsteadOfHanging) {
  SelfCommunicator self("solo");
  EXPECT_THROW(self.recv(host_tensor(3, DType::I32), 0, 1), Error);
  self.send(host_tensor(3, DType::I32), 0, 2);
  try {
    self.recv(host_tensor(4, DType::I32), 0, 2);
    ADD_FAILURE() << "length mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "recv on solo (rank 0 of 1): the matching send has 3 elements, not 4");
  }
  // An abandoned recv no longer matches: a later send stays queued for the next recv.
  Tensor abandoned = host_tensor(2, DType::I32);
  self.recv_async(abandoned, 0, 9).reset();
  Tensor x = host_tensor(2, DType::I32);
  fill(x, [](int64_t) { return 5; });
  self.send(x, 0, 9);
  EXPECT_EQ(mismatches(abandoned, [](int64_t) { return 0; }), "");
  Tensor y = host_tensor(2, DType::I32);
  self.recv(y, 0, 9);
  EXPECT_EQ(mismatches(y, [](int64_t) { return 5; }), "");
}

TEST(SelfCommunicator, SplitsAndBf16Reductions) {
  SelfCommunicator self;
  EXPECT_EQ(self.split(-1, 0), nullptr);
  std::unique_ptr<Communicator> sub = self.split(3, 0, "sub");
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->name(), "sub");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(self.split(0, 0)->name(), "self/0");
  // A reduction over one member is a copy, so even bf16 works here (MPI refuses it).
  Tensor in = host_tensor(5, DType::BF16), out = host_tensor(5, DType::BF16);
  fill(in, [](int64_t i) { return 0x3f80 + i; });
  sub->all_reduce(in, out, ReduceOp::Avg);
  EXPECT_EQ(mismatches(out, [](int64_t i) { return 0x3f80 + i; }), "");
}

}  // namespace
}  // namespace tripod::testing
