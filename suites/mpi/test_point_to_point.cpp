// send/recv (rings, tags, length errors) and the async machinery: overlapping requests waited in
// reverse order, test() until done, blocking calls between async ones, early-dropped tensors and
// requests.
#include <gtest/gtest.h>

#include <chrono>

#include "mpi_test_util.h"

namespace tripod::testing {
namespace {

TEST(PointToPoint, AsyncRingOnEveryGroup) {
  TestGroups groups;
  for (auto& [label, comm] : groups.list)
    for (DType dtype : {DType::F32, DType::BF16, DType::I32})
      for (int64_t k : kSizes) {
        SCOPED_TRACE(str_cat(label, " ", dtype_name(dtype), " k=", k));
        const int n = comm->size(), r = comm->rank();
        Tensor sent = host_tensor(k, dtype), received = host_tensor(k, dtype);
        fill(sent, [&](int64_t i) { return move_input(r, i); });
        auto send = comm->send_async(sent, (r + 1) % n, 7);
        auto recv = comm->recv_async(received, (r + n - 1) % n, 7);
        recv->wait();
        send->wait();
        EXPECT_EQ(mismatches(received, [&](int64_t i) { return move_input((r + n - 1) % n, i); }), "");
      }
}

TEST(PointToPoint, BlockingRingAlternatingOrder) {
  TestGroups groups;
  for (auto& [label, comm] : groups.list) {
    const int n = comm->size(), r = comm->rank();
    if (n < 2) continue;  // a blocking send to oneself would wait for its own recv
    SCOPED_TRACE(label);
    Tensor sent = host_tensor(1001, DType::F64), received = host_tensor(1001, DType::F64);
    fill(sent, [&](int64_t i) { return move_input(r, i); });
    // Even ranks send first, odd ranks receive first, so no cycle of blocked senders forms.
    if (r % 2 == 0) {
      comm->send(sent, (r + 1) % n, 3);
      comm->recv(received, (r + n - 1) % n, 3);
    } else {
      comm->recv(received, (r + n - 1) % n, 3);
      comm->send(sent, (r + 1) % n, 3);
    }
    EXPECT_EQ(mismatches(received, [&](int64_t i) { return move_input((r + n - 1) % n, i); }), "");
  }
}

TEST(PointToPoint, TagsMatchOutOfOrder) {
  TestGroups groups;
  for (auto& [label, comm] : groups.list) {
    SCOPED_TRACE(label);
    const int n = comm->size(), r = comm->rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
    Tensor first = host_tensor(7, DType::I32), second = host_tensor(7, DType::I32);
    fill(first, [&](int64_t i) { return 100 * r + i; });
    fill(second, [&](int64_t i) { return -100 * r - i; });
    auto s1 = comm->send_async(first, next, 1);
    auto s2 = comm->send_async(second, next, 2);
    Tensor got2 = host_tensor(7, DType::I32), got1 = host_tensor(7, DType::I32);
    comm->recv(got2, prev, 2);  // the tag-2 message was sent second but is received first
    comm->recv(got1, prev, 1);
    s2->wait();
    s1->wait();
    EXPECT_EQ(mismatches(got1, [&](int64_t i) { return 100 * prev + i; }), "");
    EXPECT_EQ(mismatches(got2, [&](int64_t i) { return -100 * prev - i; }), "");
  }
}

TEST(PointToPoint, LengthMismatchIsAClearError) {
  TestGroups groups;
  Communicator& comm = *groups.world;
  const int n = comm.size(), r = comm.rank();
  auto shorter = comm.send_async(host_tensor(5, DType::F32), (r + 1) % n, 11);
  try {
    comm.recv(host_tensor(7, DType::F32), (r + n - 1) % n, 11);
    ADD_FAILURE() << "a 5-element message received into 7 elements did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str_cat("recv on mpi:world (rank ", r, " of ", n, ")")), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("expected 7 elements"), std::string::npos) << e.what();
  }
  shorter->wait();
  auto longer = comm.send_async(host_tensor(7, DType::F32), (r + 1) % n, 12);
  EXPECT_THROW(comm.recv(host_tensor(5, DType::F32), (r + n - 1) % n, 12), Error);  // MPI_ERR_TRUNCATE
  longer->wait();
  comm.barrier();  // nobody is left waiting
}

TEST(Async, TwoRequestsWaitedInReverseOrder) {
  TestGroups groups;
  for (auto& [label, comm] : groups.list) {
    SCOPED_TRACE(label);
    const int n = comm->size(), r = comm->rank();
    Tensor a = host_tensor(1001, DType::F32), b = host_tensor(n * 7, DType::F64), b_in = host_tensor(7, DType::F64);
    fill(a, [&](int64_t i) { return reduce_input(r, i); });
    fill(b_in, [&](int64_t i) { return move_input(r, i); });
    auto first = comm->all_reduce_async(a, a, ReduceOp::Sum);
    auto second = comm->all_gather_async(b_in, b);
    second->wait();
    first->wait();
    EXPECT_EQ(mismatches(a, [&](int64_t i) {
                double s = 0;
                for (int q = 0; q < n; ++q) s += reduce_input(q, i);
                return s;
              }), "");
    EXPECT_EQ(mismatches(b, [&](int64_t j) { return move_input(static_cast<int>(j / 7), j % 7); }), "");
  }
}

TEST(Async, TestBecomesTrueWithoutWait) {
  TestGroups groups;
  Communicator& comm = *groups.world;
  const int n = comm.size();
  Tensor x = host_tensor(100000, DType::F32);
  fill(x, [](int64_t) { return 1; });
  auto reduce = comm.all_reduce_async(x, x, ReduceOp::Sum);
  auto barrier = comm.barrier_async();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool reduce_done = false, barrier_done = false;
  while (!(reduce_done && barrier_done) && std::chrono::steady_clock::now() < deadline) {
    reduce_done = reduce->test();
    barrier_done = barrier->test();
  }
  ASSERT_TRUE(reduce_done && barrier_done) << "test() never reported completion";
  EXPECT_TRUE(reduce->test()) << "test() after completion must stay true";
  reduce->wait();  // waiting on a completed request returns at once
  EXPECT_EQ(mismatches(x, [&](int64_t) { return n; }), "");
}

TEST(Async, BlockingCollectiveBetweenStartAndWait) {
  TestGroups groups;
  Communicator& comm = *groups.world;
  const int n = comm.size(), r = comm.rank();
  Tensor x = host_tensor(7, DType::I32), y = host_tensor(3, DType::I32);
  fill(x, [&](int64_t) { return r; });
  fill(y, [&](int64_t i) { return move_input(r, i); });
  auto pending = comm.all_reduce_async(x, x, ReduceOp::Max);
  comm.broadcast(y, n - 1);
  pending->wait();
  EXPECT_EQ(mismatches(x, [&](int64_t) { return n - 1; }), "");
  EXPECT_EQ(mismatches(y, [&](int64_t i) { return move_input(n - 1, i); }), "");
}

TEST(Async, RequestKeepsBuffersAliveAndDestructorWaits) {
  TestGroups groups;
  Communicator& comm = *groups.world;
  const int n = comm.size(), r = comm.rank();
  Tensor out = host_tensor(1001, DType::F64);
  std::unique_ptr<CommRequest> pending;
  {
    Tensor in = host_tensor(1001, DType::F64);
    fill(in, [&](int64_t i) { return reduce_input(r, i); });
    pending = comm.all_reduce_async(in, out, ReduceOp::Sum);
  }  // the caller's `in` is gone; the request still holds its storage
  pending.reset();  // destroying an incomplete request waits for it
  EXPECT_EQ(mismatches(out, [&](int64_t i) {
              double s = 0;
              for (int q = 0; q < n; ++q) s += reduce_input(q, i);
              return s;
            }), "");
}

}  // namespace
}  // namespace tripod::testing
