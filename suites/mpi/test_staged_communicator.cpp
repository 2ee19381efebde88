// Collectives on a device's tensors through StagedCommunicator (the path a GPU's tensors take to an
// MPI that is not CUDA-aware), on the emulated device whatever TRIPOD_TEST_BACKEND says: every
// operation, in place and out of place, blocking and async, on the world, halves with reversed
// keys and a group of one; host tensors pass straight through; bf16 reduces in fp32.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/transfer.h"
#include "comm/staged_communicator.h"
#include "core/bf16.h"
#include "core/host_memory.h"
#include "mpi_test_util.h"

namespace tripod::testing {
namespace {

Backend& emulated() {
  static const std::unique_ptr<Backend> backend = make_emulated_backend();
  return *backend;
}

// Device tensors are written and read only through the backend.
void upload_values(const Tensor& t, const std::function<double(int64_t)>& value) {
  std::vector<double> host(static_cast<std::size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) host[static_cast<std::size_t>(i)] = value(i);
  if (t.dtype() == DType::I32) {
    std::vector<int32_t> ids(host.begin(), host.end());
    emulated().upload(ids.data(), t);
  } else {
    from_host_f64(emulated(), host, t);
  }
}

Tensor device_tensor(int64_t n, DType dtype, const std::function<double(int64_t)>& value) {
  Tensor t = emulated().alloc({n}, dtype);
  upload_values(t, value);
  return t;
}

std::string device_mismatches(const Tensor& got, const std::function<double(int64_t)>& expected) {
  const std::vector<double> host = to_host_f64(emulated(), got);
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (host[static_cast<std::size_t>(i)] != expected(i)) {
      if (first < 0) first = i;
      ++count;
    }
  if (count == 0) return "";
  return str_cat(count, " of ", got.numel(), " differ; first at ", first, ": got ", host[static_cast<std::size_t>(first)],
                 ", expected ", expected(first));
}

struct StagedGroups {
  std::unique_ptr<Communicator> world = std::make_unique<StagedCommunicator>(mpi_world(), emulated());
  std::vector<std::unique_ptr<Communicator>> owned;
  std::vector<std::pair<std::string, Communicator*>> list;
  StagedGroups() {
    const int n = world->size(), r = world->rank();
    list.emplace_back("world", world.get());
    owned.push_back(world->split(r < (n + 1) / 2 ? 0 : 1, -r, "halves-reversed"));
    owned.push_back(std::make_unique<SelfCommunicator>("self", &emulated()));
    for (std::size_t i = 1; i < 3; ++i) list.emplace_back(owned[i - 1]->name(), owned[i - 1].get());
  }
};

template <typename Body>
void for_each_case(const std::vector<DType>& dtypes, Body body) {
  StagedGroups groups;
  for (auto& [label, comm] : groups.list)
    for (DType dtype : dtypes)
      for (int64_t k : kSizes)
        for (Mode mode : kModes) {
          SCOPED_TRACE(str_cat(label, " (rank ", comm->rank(), " of ", comm->size(), ") ", dtype_name(dtype), " k=", k,
                               mode.in_place ? " in-place" : " out-of-place", mode.async ? " async" : " blocking"));
          body(*comm, dtype, k, mode);
        }
}

const std::vector<DType> kTypes = {DType::F32, DType::F64, DType::I32};

double sum_over(int n, const std::function<double(int)>& value) {
  double s = 0;
  for (int q = 0; q < n; ++q) s += value(q);
  return s;
}

TEST(StagedCommunicator, AllReduceAndReduceScatter) {
  for_each_case(kTypes, [](Communicator& comm, DType dtype, int64_t k, Mode mode) {
    const int n = comm.size(), r = comm.rank();
    Tensor in = device_tensor(k, dtype, [&](int64_t i) { return reduce_input(r, i); });
    Tensor out = mode.in_place ? in : emulated().alloc({k}, dtype);
    if (mode.async) comm.all_reduce_async(in, out, ReduceOp::Sum)->wait();
    else comm.all_reduce(in, out, ReduceOp::Sum);
    EXPECT_EQ(device_mismatches(out, [&](int64_t i) { return sum_over(n, [&](int q) { return reduce_input(q, i); }); }), "");

    Tensor whole = device_tensor(n * k, dtype, [&](int64_t i) { return reduce_input(r, i); });
    Tensor mine = mode.in_place ? whole.view(r * k, {k}) : emulated().alloc({k}, dtype);
    if (mode.async) comm.reduce_scatter_async(whole, mine, ReduceOp::Max)->wait();
    else comm.reduce_scatter(whole, mine, ReduceOp::Max);
    EXPECT_EQ(device_mismatches(mine, [&](int64_t i) {
                double m = reduce_input(0, r * k + i);
                for (int q = 1; q < n; ++q) m = std::max(m, reduce_input(q, r * k + i));
                return m;
              }), "");
  });
}

TEST(StagedCommunicator, AllGatherAllToAllAndBroadcast) {
  for_each_case({DType::F32, DType::F64, DType::I32, DType::BF16}, [](Communicator& comm, DType dtype, int64_t k, Mode mode) {
    const int n = comm.size(), r = comm.rank();
    // bf16 holds integers up to 256 exactly: keep the values small enough for every dtype.
    auto value = [](int rank, int64_t i) { return static_cast<double>((rank * 37 + i * 11) % 251); };
    const int64_t kk = std::max<int64_t>(k, 1);  // block size for index arithmetic (no elements when k = 0)
    Tensor out = emulated().alloc({n * k}, dtype);
    Tensor in = mode.in_place ? out.view(r * k, {k}) : emulated().alloc({k}, dtype);
    upload_values(in, [&](int64_t i) { return value(r, i); });
    if (mode.async) comm.all_gather_async(in, out)->wait();
    else comm.all_gather(in, out);
    EXPECT_EQ(device_mismatches(out, [&](int64_t j) { return value(static_cast<int>(j / kk), j % kk); }), "");

    Tensor send = device_tensor(n * k, dtype == DType::BF16 ? DType::F32 : dtype, [&](int64_t j) { return value(r, j); });
    Tensor recv = mode.in_place ? send : emulated().alloc({n * k}, send.dtype());
    if (mode.async) comm.all_to_all_async(send, recv)->wait();
    else comm.all_to_all(send, recv);
    // block s of recv came from rank s's block r
    EXPECT_EQ(device_mismatches(recv, [&](int64_t j) { return value(static_cast<int>(j / kk), r * k + j % kk); }), "");

    for (int root : {0, n - 1}) {
      Tensor t = device_tensor(k, DType::F64, [&](int64_t i) { return r == root ? value(root, i) : -1.0; });
      if (mode.async) comm.broadcast_async(t, root)->wait();
      else comm.broadcast(t, root);
      EXPECT_EQ(device_mismatches(t, [&](int64_t i) { return value(root, i); }), "") << "root " << root;
    }
  });
}

TEST(StagedCommunicator, ReduceWritesTheRootOnlyAndPointToPointRingsDeliver) {
  for_each_case(kTypes, [](Communicator& comm, DType dtype, int64_t k, Mode mode) {
    const int n = comm.size(), r = comm.rank();
    const int root = n - 1;
    Tensor in = device_tensor(k, dtype, [&](int64_t i) { return reduce_input(r, i); });
    Tensor out = mode.in_place ? in : device_tensor(k, dtype, [](int64_t) { return -99.0; });
    if (mode.async) comm.reduce_async(in, out, ReduceOp::Sum, root)->wait();
    else comm.reduce(in, out, ReduceOp::Sum, root);
    if (r == root) {
      EXPECT_EQ(device_mismatches(out, [&](int64_t i) { return sum_over(n, [&](int q) { return reduce_input(q, i); }); }), "");
    } else if (!mode.in_place) {
      EXPECT_EQ(device_mismatches(out, [](int64_t) { return -99.0; }), "") << "a non-root's output was written";
    }
    Tensor message = device_tensor(k, dtype, [&](int64_t i) { return move_input(r, i); });
    Tensor received = emulated().alloc({k}, dtype);
    auto sent = comm.send_async(message, (r + 1) % n, 3);
    auto got = comm.recv_async(received, (r - 1 + n) % n, 3);
    got->wait();
    sent->wait();
    EXPECT_EQ(device_mismatches(received, [&](int64_t i) { return move_input((r - 1 + n) % n, i); }), "");
  });
}

TEST(StagedCommunicator, HostTensorsPassThroughAndOtherDevicesAreRefused) {
  StagedGroups groups;
  Communicator& world = *groups.world;
  const int n = world.size(), r = world.rank();
  Tensor host = host_tensor(5, DType::F64);
  fill(host, [&](int64_t i) { return reduce_input(r, i); });
  world.all_reduce(host, host, ReduceOp::Sum);
  EXPECT_EQ(mismatches(host, [&](int64_t i) { return sum_over(n, [&](int q) { return reduce_input(q, i); }); }), "");
  static char fake[16];
  Tensor gpu(std::make_shared<Storage>(fake, sizeof fake, Device::Cuda, nullptr), 0, Shape{4}, DType::F32);
  try {
    world.all_reduce(gpu, gpu, ReduceOp::Sum);
    ADD_FAILURE() << "a cuda tensor must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot move a fp32 [4] on the cuda tensor"), std::string::npos) << e.what();
  }
  world.barrier();
}

// An async request dropped without wait() completes in its destructor, and its result still
// reaches the device tensor (as with every Communicator, the result is there once it completed).
TEST(StagedCommunicator, ADroppedRequestStillDeliversItsResult) {
  StagedGroups groups;
  Communicator& world = *groups.world;
  const int n = world.size(), r = world.rank();
  Tensor t = device_tensor(9, DType::F64, [&](int64_t i) { return reduce_input(r, i); });
  world.all_reduce_async(t, t, ReduceOp::Sum);  // the request is destroyed at once
  EXPECT_EQ(device_mismatches(t, [&](int64_t i) { return sum_over(n, [&](int q) { return reduce_input(q, i); }); }), "");
}

// bf16 through MPI: every contribution widened to fp32, summed, rounded once. With 256 on rank 0
// and 1 on every other rank, a bf16 running sum would stay at 256 (256 + 1 rounds back to 256);
// one rounding of the fp32 sum gives the nearest bf16 to 256 + (n - 1).
TEST(StagedCommunicator, Bf16ReducesInFp32AndRoundsOnce) {
  StagedGroups groups;
  for (auto& [label, comm] : groups.list) {
    const int n = comm->size(), r = comm->rank();
    SCOPED_TRACE(label);
    auto contribution = [&](int rank, int64_t i) { return rank == 0 ? 256.0 + 2 * static_cast<double>(i % 4) : 1.0; };
    auto expected = [&](int64_t i) {
      return static_cast<double>(bf16_to_float(float_to_bf16(static_cast<float>(256.0 + 2 * static_cast<double>(i % 4) + (n - 1)))));
    };
    for (bool on_device : {true, false})
      for (Mode mode : kModes) {
        const int64_t k = 6;
        std::vector<double> mine(static_cast<std::size_t>(k));
        for (int64_t i = 0; i < k; ++i) mine[static_cast<std::size_t>(i)] = contribution(r, i);
        Tensor in = on_device ? emulated().alloc({k}, DType::BF16) : host_alloc({k}, DType::BF16);
        if (on_device) {
          from_host_f64(emulated(), mine, in);
        } else {
          for (int64_t i = 0; i < k; ++i) in.data<bf16>()[i] = double_to_bf16(mine[static_cast<std::size_t>(i)]);
        }
        Tensor out = mode.in_place ? in : (on_device ? emulated().alloc({k}, DType::BF16) : host_alloc({k}, DType::BF16));
        if (mode.async) comm->all_reduce_async(in, out, ReduceOp::Sum)->wait();
        else comm->all_reduce(in, out, ReduceOp::Sum);
        std::vector<double> got(static_cast<std::size_t>(k));
        if (on_device) got = to_host_f64(emulated(), out);
        else
          for (int64_t i = 0; i < k; ++i) got[static_cast<std::size_t>(i)] = bf16_to_float(out.data<bf16>()[i]);
        for (int64_t i = 0; i < k; ++i)
          EXPECT_EQ(got[static_cast<std::size_t>(i)], expected(i)) << "element " << i << (on_device ? " device" : " host");
      }
    // Avg divides the fp32 sum before the one rounding.
    Tensor t = emulated().alloc({1}, DType::BF16);
    from_host_f64(emulated(), {static_cast<double>(r + 1)}, t);
    comm->all_reduce(t, t, ReduceOp::Avg);
    EXPECT_EQ(to_host_f64(emulated(), t)[0], bf16_to_float(float_to_bf16(static_cast<float>(n * (n + 1) / 2) / static_cast<float>(n))));
  }
}

}  // namespace
}  // namespace tripod::testing
