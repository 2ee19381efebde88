// all_gather, broadcast and all_to_all on every test group, every dtype (bf16 moved as raw bits),
// sizes 0, 1, 7 and 1001 per block, in place and out of place, blocking and async.
#include <gtest/gtest.h>

#include "mpi_test_util.h"

namespace tripod::testing {
namespace {

template <typename Body>
void for_each_case(Body body) {
  TestGroups groups;
  for (auto& [label, comm] : groups.list)
    for (DType dtype : kAllTypes)
      for (int64_t k : kSizes)
        for (Mode mode : kModes) {
          SCOPED_TRACE(str_cat(label, " (rank ", comm->rank(), " of ", comm->size(), ") ", dtype_name(dtype), " k=", k,
                               mode.in_place ? " in-place" : " out-of-place", mode.async ? " async" : " blocking"));
          body(*comm, dtype, k, mode);
        }
}

TEST(DataMovement, AllGather) {
  for_each_case([](Communicator& comm, DType dtype, int64_t k, Mode mode) {
    const int n = comm.size(), r = comm.rank();
    Tensor out = host_tensor(n * k, dtype);
    // In place: in is this rank's own block of out.
    Tensor in = mode.in_place ? out.view(r * k, {k}) : host_tensor(k, dtype);
    fill(in, [&](int64_t i) { return move_input(r, i); });
    if (mode.async) comm.all_gather_async(in, out)->wait();
    else comm.all_gather(in, out);
    EXPECT_EQ(mismatches(out, [&](int64_t j) { return move_input(static_cast<int>(j / k), j % k); }), "");
  });
}

TEST(DataMovement, BroadcastFromEachRoot) {
  for_each_case([](Communicator& comm, DType dtype, int64_t k, Mode mode) {
    if (mode.in_place) return;  // broadcast has one tensor: nothing to vary
    const int n = comm.size(), r = comm.rank();
    for (int root : {0, n / 2, n - 1}) {
      Tensor t = host_tensor(k, dtype);
      fill(t, [&](int64_t i) { return move_input(r, i); });
      if (mode.async) comm.broadcast_async(t, root)->wait();
      else comm.broadcast(t, root);
      EXPECT_EQ(mismatches(t, [&](int64_t i) { return move_input(root, i); }), "") << "root " << root;
    }
  });
}

TEST(DataMovement, AllToAll) {
  for_each_case([](Communicator& comm, DType dtype, int64_t k, Mode mode) {
    const int n = comm.size(), r = comm.rank();
    Tensor in = host_tensor(n * k, dtype);
    fill(in, [&](int64_t i) { return move_input(r, i); });
    Tensor out = mode.in_place ? in : host_tensor(n * k, dtype);
    if (mode.async) comm.all_to_all_async(in, out)->wait();
    else comm.all_to_all(in, out);
    // Block j of this rank's out is block r of rank j's in.
    EXPECT_EQ(mismatches(out, [&](int64_t x) { return move_input(static_cast<int>(x / k), r * k + x % k); }), "");
  });
}

}  // namespace
}  // namespace tripod::testing
