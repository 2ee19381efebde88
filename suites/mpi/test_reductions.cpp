// all_reduce, reduce_scatter and reduce on every test group, dtype, reduce op and size (0, 1, 7,
// 1001), in place and out of place, blocking and async, against the result computed serially
// here from the inputs every rank can reproduce (reduce_input(rank, index)).
#include <gtest/gtest.h>

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

template <typename Body>
void for_each_case(Body body) {
  TestGroups groups;
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

TEST(Reductions, AllReduce) {
  for_each_case([](Communicator& comm, DType dtype, ReduceOp op, int64_t k, Mode mode) {
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
  });
}

TEST(Reductions, ReduceScatter) {
  for_each_case([](Communicator& comm, DType dtype, ReduceOp op, int64_t k, Mode mode) {
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
  });
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

}  // namespace
}  // namespace tripod::testing
