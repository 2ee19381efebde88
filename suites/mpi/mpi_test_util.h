// Helpers for the multi-rank suites: host tensors of any dtype, element access as double, a
// comparison that reports the first mismatch, and the list of groups every collective is tested on.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/test_backend.h"
#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "parallel/parallel_layout.h"
#include "parallel/process_grid.h"

namespace tripod::testing {

// A zero-filled CPU tensor of n elements (any dtype, including bf16, which the CPU backend lacks).
inline Tensor host_tensor(int64_t n, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  void* data = bytes ? std::calloc(bytes, 1) : nullptr;
  return Tensor(std::make_shared<Storage>(data, bytes, Device::Host, [](void* p) { std::free(p); }), 0, Shape{n},
                dtype);
}

// Element i as a double; bf16 elements are read as their raw 16 bits (only ever moved, not reduced).
inline double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(t.raw())[i];
    case DType::F64: return static_cast<const double*>(t.raw())[i];
    case DType::I32: return static_cast<const int32_t*>(t.raw())[i];
    case DType::BF16: return static_cast<const uint16_t*>(t.raw())[i];
  }
  return 0;
}

inline void set(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::F32: static_cast<float*>(t.raw())[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(t.raw())[i] = v; break;
    case DType::I32: static_cast<int32_t*>(t.raw())[i] = static_cast<int32_t>(v); break;
    case DType::BF16: static_cast<uint16_t*>(t.raw())[i] = static_cast<uint16_t>(v); break;
  }
}

inline void fill(const Tensor& t, const std::function<double(int64_t)>& value) {
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, value(i));
}

// "" when every element equals expected(i) exactly, else the first mismatch and the count.
inline std::string mismatches(const Tensor& got, const std::function<double(int64_t)>& expected) {
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (get(got, i) != expected(i)) {
      if (first < 0) first = i;
      ++count;
    }
  }
  if (count == 0) return "";
  return str_cat(count, " of ", got.numel(), " elements differ; first at ", first, ": got ", get(got, first),
                 ", expected ", expected(first));
}

// Small signed integers: sums over 8 ranks stay exact in every dtype, so any reduction order
// gives the same bits and results can be compared exactly.
inline double reduce_input(int rank, int64_t i) { return static_cast<double>(((rank + 1) * 7 + i * 3) % 23 - 11); }
// Non-negative values below 2^15 that differ per rank and element, for data movement (and bf16 bits).
inline double move_input(int rank, int64_t i) { return static_cast<double>((rank * 1009 + i * 31 + 5) % 30011); }

// The groups this rank belongs to, each labelled: the world, a SelfCommunicator, halves, parity
// groups with reversed key order, singletons, the tp/dp/pp/embedding groups of a grid that fits,
// and the dp/pp groups of a second grid whose groups are strided.
// Building them is collective, so every rank builds them in the same order.
struct TestGroups {
  std::unique_ptr<Communicator> world;
  std::vector<std::unique_ptr<Communicator>> owned;
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<ProcessGrid> strided_grid;
  std::vector<std::pair<std::string, Communicator*>> list;

  explicit TestGroups(int64_t chunk_bytes = kDefaultMpiChunkBytes) : world(test_world(chunk_bytes)) {
    const int n = world->size(), r = world->rank();
    list.emplace_back("world", world.get());
    add("self", std::make_unique<SelfCommunicator>());
    add("halves", world->split(r < (n + 1) / 2 ? 0 : 1, r, "halves"));
    add("parity-reversed", world->split(r % 2, -r, "parity"));
    add("singleton", world->split(r, 0, "singleton"));
    GridShape shape;
    shape.tp = n % 2 == 0 ? 2 : 1;
    shape.pp = (n / shape.tp) % 2 == 0 ? 2 : 1;
    shape.dp = n / (shape.tp * shape.pp);
    grid = std::make_unique<ProcessGrid>(*world, shape);
    const std::string label = describe(shape) + " ";
    list.emplace_back(label + "tp", &grid->tp());
    list.emplace_back(label + "dp", &grid->dp());
    list.emplace_back(label + "pp", &grid->pp());
    if (grid->embedding()) list.emplace_back(label + "embedding", grid->embedding());
    // A second layout with pipeline-fastest order, so the groups are strided (8 ranks: tp=1 pp=4
    // dp=2, dp groups {0,4}, {1,5}, ...).
    GridShape strided;
    strided.pp = n >= 4 ? n / 2 : n;
    strided.dp = n / strided.pp;
    strided_grid = std::make_unique<ProcessGrid>(*world, strided, "pp-dp-tp");
    const std::string strided_label = describe(strided) + " pp-dp-tp ";
    list.emplace_back(strided_label + "dp", &strided_grid->dp());
    list.emplace_back(strided_label + "pp", &strided_grid->pp());
  }

 private:
  void add(const std::string& label, std::unique_ptr<Communicator> comm) {
    if (!comm) return;
    list.emplace_back(label, comm.get());
    owned.push_back(std::move(comm));
  }
};

inline const std::vector<int64_t> kSizes = {0, 1, 7, 1001};

// A layout as the trainer takes it (small buckets, so even the test models have several).
inline ParallelLayout make_layout(int tp, int pp, int dp, int zero, int micro_batches = 1,
                                  ScheduleKind schedule = ScheduleKind::OneFOneB, int virtual_stages = 1) {
  ParallelLayout l;
  l.tp = tp, l.pp = pp, l.dp = dp, l.zero = zero, l.micro_batches = micro_batches;
  l.schedule = schedule, l.virtual_stages = virtual_stages;
  l.bucket_bytes = 4096;
  return l;
}

// How a collective is called: in place or not, blocking or async.
struct Mode {
  bool in_place;
  bool async;
};
constexpr Mode kModes[] = {{false, false}, {false, true}, {true, false}, {true, true}};
inline const std::vector<DType> kReducibleTypes = {DType::F32, DType::F64, DType::I32};
inline const std::vector<DType> kAllTypes = {DType::F32, DType::F64, DType::I32, DType::BF16};

}  // namespace tripod::testing
