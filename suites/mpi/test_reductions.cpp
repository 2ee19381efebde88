// all_reduce, reduce_scatter and reduce on every test group, dtype, reduce op and size (0, 1, 7,
// 1001), in place and out of place, blocking and async, against the result computed serially
// here from the inputs every rank can reproduce (reduce_input(rank, index)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "comm/mpi_algorithms.h"
#include "core/bf16.h"
#include "core/host_memory.h"

#include "mpi_test_util.h"

namespace tripod::testing {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

// The reduction over ranks 0..n-1 of value(rank), rounded as the communicator rounds it: exact
// integer sums, then Avg divides in the tensor's own dtype.
double expected_reduction(ReduceOp op, DType dtype, int n, const std::function<double(int)>& value) {
  double acc = value(0);
  for (int r = 1; r < n; ++r) {
    const double v = value(r);
    acc = op == ReduceOp::Max ? std::max(acc, v) : op == ReduceOp::Min ? std::min(acc, v) : acc + v;
  }
  if (op != ReduceOp::Avg) return acc;
  if (dtype == DType::F32) return static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
  return acc / n;
}

// Async calls are driven by test() until done, then waited on (which must return at once).
void finish(std::unique_ptr<CommRequest> request) {
  while (!request->test()) {
  }
  request->wait();
}

// chunk_bytes: the communicators' piece size (comm/reduction_pieces.h); the default leaves every
// message here whole.
template <typename Body>
void for_each_case(Body body, int64_t chunk_bytes = kDefaultMpiChunkBytes) {
  TestGroups groups(chunk_bytes);
  for (auto& [label, comm] : groups.list)
    for (DType dtype : kReducibleTypes)
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::Avg && dtype == DType::I32) continue;
        for (int64_t k : kSizes)
          for (Mode mode : kModes) {
            SCOPED_TRACE(str_cat(label, " (rank ", comm->rank(), " of ", comm->size(), ") ", dtype_name(dtype), " ",
                                 reduce_op_name(op), " k=", k, mode.in_place ? " in-place" : " out-of-place",
                                 mode.async ? " async" : " blocking"));
            body(*comm, dtype, op, k, mode);
          }
      }
}

void check_all_reduce(Communicator& comm, DType dtype, ReduceOp op, int64_t k, Mode mode) {
  const int n = comm.size(), r = comm.rank();
  Tensor in = host_tensor(k, dtype);
  fill(in, [&](int64_t i) { return reduce_input(r, i); });
  Tensor out = mode.in_place ? in : host_tensor(k, dtype);
  if (mode.async) finish(comm.all_reduce_async(in, out, op));
  else comm.all_reduce(in, out, op);
  EXPECT_EQ(mismatches(out, [&](int64_t i) {
              return expected_reduction(op, dtype, n, [&](int q) { return reduce_input(q, i); });
            }), "");
  if (!mode.in_place) {
    EXPECT_EQ(mismatches(in, [&](int64_t i) { return reduce_input(r, i); }), "") << "input changed";
  }
}

void check_reduce_scatter(Communicator& comm, DType dtype, ReduceOp op, int64_t k, Mode mode) {
  const int n = comm.size(), r = comm.rank();
  Tensor in = host_tensor(n * k, dtype);
  fill(in, [&](int64_t i) { return reduce_input(r, i); });
  // In place: out is this rank's own block of in.
  Tensor out = mode.in_place ? in.view(r * k, {k}) : host_tensor(k, dtype);
  if (mode.async) finish(comm.reduce_scatter_async(in, out, op));
  else comm.reduce_scatter(in, out, op);
  EXPECT_EQ(mismatches(out, [&](int64_t i) {
              return expected_reduction(op, dtype, n, [&](int q) { return reduce_input(q, r * k + i); });
            }), "");
  if (!mode.in_place) {
    EXPECT_EQ(mismatches(in, [&](int64_t i) { return reduce_input(r, i); }), "") << "input changed";
  }
}

TEST(Reductions, AllReduce) { for_each_case(check_all_reduce); }
TEST(Reductions, ReduceScatter) { for_each_case(check_reduce_scatter); }

// In pieces (comm/reduction_pieces.h) of 24 bytes, so that k = 7 and 1001 take several: pieces of
// one element up to six, a shorter last one, reduce_scatter packing columns of every block.
TEST(Reductions, AllReduceInPieces) { for_each_case(check_all_reduce, 24); }
TEST(Reductions, ReduceScatterInPieces) { for_each_case(check_reduce_scatter, 24); }

// Non-integer values: with two ranks a sum has one rounding, so the pieces must give the very bits
// of the whole message (fp32 and bf16, in place as the gradient buckets call them, and not).
TEST(Reductions, PiecesBitIdenticalToWholeWithTwoRanks) {
  auto whole = test_world(0), pieces = test_world(40);
  if (whole->size() != 2) GTEST_SKIP() << "needs exactly 2 ranks (this run has " << whole->size() << ")";
  const int r = whole->rank();
  auto value = [r](int64_t i) { return std::sin(0.37 * static_cast<double>(i) + r) * 1e3 / (1.0 + i % 13); };
  for (DType dtype : {DType::F32, DType::BF16})
    for (bool scatter : {false, true})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), scatter ? " reduce_scatter" : " all_reduce",
                             in_place ? " in place" : ""));
        const int64_t k = 1001, n_in = scatter ? 2 * k : k;
        auto run = [&](Communicator& comm) {
          Tensor in = host_alloc({n_in}, DType::F32);
          for (int64_t i = 0; i < n_in; ++i) in.data<float>()[i] = static_cast<float>(value(i));
          Tensor typed = in;
          if (dtype == DType::BF16) {
            typed = host_alloc({n_in}, DType::BF16);
            for (int64_t i = 0; i < n_in; ++i) typed.data<bf16>()[i] = float_to_bf16(in.data<float>()[i]);
          }
          Tensor out = in_place ? (scatter ? typed.view(r * k, {k}) : typed) : host_alloc({k}, dtype);
          if (scatter) finish(comm.reduce_scatter_async(typed, out, ReduceOp::Sum));
          else finish(comm.all_reduce_async(typed, out, ReduceOp::Sum));
          const char* bytes = static_cast<const char*>(out.raw());
          return std::vector<char>(bytes, bytes + out.bytes());
        };
        EXPECT_TRUE(run(*whole) == run(*pieces));
      }
}

// With two ranks a reduce_scatter, blocking or not, is two reduces, one rooted at each rank
// (comm/mpi_ops.cpp), where the library's MPI_Reduce_scatter_block ran the blocking one until
// 2026-12-05. Each must give each rank exactly float(a) + float(b) for its block, the library's
// bits (a sum of two is one rounding), and the two forms the same bits.
TEST(Reductions, NonBlockingReduceScatterOfTwoRanksIsBitIdenticalToBlocking) {
  auto comm = test_world(0);
  if (comm->size() != 2) GTEST_SKIP() << "needs exactly 2 ranks (this run has " << comm->size() << ")";
  const int r = comm->rank();
  auto value = [](int rank, int64_t i) {
    return static_cast<float>(std::cos(0.91 * static_cast<double>(i) + 3 * rank) * 1e2 / (1.0 + i % 7));
  };
  for (DType dtype : {DType::F32, DType::BF16})
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), in_place ? " in place" : ""));
      const int64_t k = 4099;
      auto run = [&](bool blocking) {
        Tensor in = host_alloc({2 * k}, dtype);
        for (int64_t i = 0; i < 2 * k; ++i) {
          if (dtype == DType::F32) in.data<float>()[i] = value(r, i);
          else in.data<bf16>()[i] = float_to_bf16(value(r, i));
        }
        Tensor out = in_place ? in.view(r * k, {k}) : host_alloc({k}, dtype);
        if (blocking) comm->reduce_scatter(in, out, ReduceOp::Sum);
        else finish(comm->reduce_scatter_async(in, out, ReduceOp::Sum));
        const char* bytes = static_cast<const char*>(out.raw());
        return std::vector<char>(bytes, bytes + out.bytes());
      };
      const std::vector<char> async = run(false), blocking = run(true);
      EXPECT_TRUE(async == blocking);
      if (dtype != DType::F32) continue;
      for (const std::vector<char>* result : {&async, &blocking}) {
        const float* got = reinterpret_cast<const float*>(result->data());
        int64_t wrong = 0;
        for (int64_t i = 0; i < k; ++i) wrong += got[i] != value(0, r * k + i) + value(1, r * k + i);
        EXPECT_EQ(wrong, 0) << (result == &async ? "non-blocking" : "blocking");
      }
    }
}

// Pieces start inside test() and wait(), at different moments on different ranks: two reductions
// in pieces and a whole collective in flight together, driven differently on each rank (even
// ranks test the first one until its pieces finish before they issue the others, odd ranks not at
// all), must still match up. (On the caller's own communicator they would not.)
TEST(Reductions, PiecesInFlightAmongOtherCollectivesMatchOnEveryRank) {
  auto world = test_world(64);
  const int n = world->size(), r = world->rank();
  const int64_t k = 301;  // 1204+ bytes in 64-byte pieces
  Tensor a = host_tensor(k, DType::F32), b = host_tensor(3, DType::F64), c = host_tensor(n * k, DType::F64);
  fill(a, [&](int64_t i) { return reduce_input(r, i); });
  fill(b, [&](int64_t i) { return reduce_input(r, 1000 + i); });
  fill(c, [&](int64_t i) { return reduce_input(r, 2000 + i); });
  Tensor c_out = host_tensor(k, DType::F64);
  auto ra = world->all_reduce_async(a, a, ReduceOp::Sum);
  if (r % 2 == 0)
    while (!ra->test()) {
    }
  auto rb = world->all_reduce_async(b, b, ReduceOp::Sum);
  auto rc = world->reduce_scatter_async(c, c_out, ReduceOp::Sum);
  rc->wait();
  rb->wait();
  ra->wait();
  auto sum = [&](int64_t at) { return expected_reduction(ReduceOp::Sum, DType::F64, n, [&](int q) { return reduce_input(q, at); }); };
  EXPECT_EQ(mismatches(a, [&](int64_t i) { return sum(i); }), "");
  EXPECT_EQ(mismatches(b, [&](int64_t i) { return sum(1000 + i); }), "");
  EXPECT_EQ(mismatches(c_out, [&](int64_t i) { return sum(2000 + r * k + i); }), "");
}

TEST(Reductions, ReduceToEachRoot) {
  for_each_case([](Communicator& comm, DType dtype, ReduceOp op, int64_t k, Mode mode) {
    const int n = comm.size(), r = comm.rank();
    for (int root : {0, n - 1}) {
      Tensor in = host_tensor(k, dtype);
      fill(in, [&](int64_t i) { return reduce_input(r, i); });
      Tensor out = mode.in_place ? in : host_tensor(k, dtype);
      if (!mode.in_place) fill(out, [](int64_t) { return -99; });
      if (mode.async) finish(comm.reduce_async(in, out, op, root));
      else comm.reduce(in, out, op, root);
      if (r == root) {
        EXPECT_EQ(mismatches(out, [&](int64_t i) {
                    return expected_reduction(op, dtype, n, [&](int q) { return reduce_input(q, i); });
                  }), "") << "root " << root;
      } else {
        EXPECT_EQ(mismatches(in, [&](int64_t i) { return reduce_input(r, i); }), "") << "non-root input changed";
        if (!mode.in_place) {
          EXPECT_EQ(mismatches(out, [](int64_t) { return -99; }), "") << "non-root out written";
        }
      }
    }
  });
}

// MpiRuntime asks Open MPI for its ring all-reduce and binomial reduce before MPI_Init
// (comm/mpi_algorithms.h), unless the environment already chose: what Open MPI reports is what the
// environment holds.
TEST(Reductions, NonBlockingAllReduceUsesTheAlgorithmTheRuntimeChose) {
  const char* chosen = std::getenv(kIallreduceAlgorithmVariable);
  ASSERT_NE(chosen, nullptr) << kIallreduceAlgorithmVariable << " was not set before MPI_Init";
  EXPECT_EQ(iallreduce_algorithm(), std::atoi(chosen));
}

TEST(Reductions, NonBlockingReduceUsesTheAlgorithmTheRuntimeChose) {
  const char* chosen = std::getenv(kIreduceAlgorithmVariable);
  ASSERT_NE(chosen, nullptr) << kIreduceAlgorithmVariable << " was not set before MPI_Init";
  EXPECT_EQ(ireduce_algorithm(), std::atoi(chosen));
}

}  // namespace
}  // namespace tripod::testing
