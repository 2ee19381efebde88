// The conjugate operators f, g, ḡ, ḡ* (parallel/tp_regions.h), forward and backward, blocking
// and async, on TP groups of every size in {1, 2, 3, 4, 8} that divides the world. Inputs are
// small integers (mpi_test_util.h: reduce_input), so every sum is exact in fp32 and fp64 whatever
// order the library adds in, and every result is compared bit for bit.
#include "support/test_backend.h"
#include "mpi_test_util.h"
#include "parallel/tp_regions.h"
#include "tp_test_util.h"

namespace tripod::testing {
namespace {

constexpr int64_t kWidth = 5;  // features per token
constexpr int64_t kBlock = 3;  // tokens per rank under sequence parallelism

const std::vector<int> kRegionSizes = {1, 2, 3, 4, 8};

// Value of element i of rank r's input.
double input(int r, int64_t i) { return reduce_input(r, i); }
double sum_over(int t, int64_t i) {
  double s = 0;
  for (int r = 0; r < t; ++r) s += input(r, i);
  return s;
}

class TpRegions : public ::testing::TestWithParam<DType> {};

TEST_P(TpRegions, CopyToAndReduceFromRegion) {
  const DType dt = GetParam();
  auto world = testing::test_world();
  for (int t : tp_sizes(world->size(), kRegionSizes)) {
    SCOPED_TRACE("tp=" + std::to_string(t));
    auto tp = tp_group(*world, t);
    const int r = tp->rank();
    const int64_t n = 2 * t * kWidth;  // [N, C] with N = 2t
    for (bool async : {false, true}) {
      SCOPED_TRACE(async ? "async" : "blocking");
      // f forward: the very same tensor; f backward: the sum over the group, in place.
      Tensor x = host_tensor(n, dt);
      fill(x, [&](int64_t i) { return input(r, i); });
      EXPECT_EQ(&tp::copy_to_tp_region_forward(x), &x);
      if (async)
        tp::copy_to_tp_region_backward_async(*tp, x)->wait();
      else
        tp::copy_to_tp_region_backward(*tp, x);
      EXPECT_EQ(mismatches(x, [&](int64_t i) { return sum_over(t, i); }), "") << "f backward";
      // g forward: the sum over the group, in place; g backward: the very same tensor.
      Tensor y = host_tensor(n, dt);
      fill(y, [&](int64_t i) { return input(r, i); });
      if (async)
        tp::reduce_from_tp_region_forward_async(*tp, y)->wait();
      else
        tp::reduce_from_tp_region_forward(*tp, y);
      EXPECT_EQ(mismatches(y, [&](int64_t i) { return sum_over(t, i); }), "") << "g forward";
      EXPECT_EQ(&tp::reduce_from_tp_region_backward(y), &y);
    }
  }
}

TEST_P(TpRegions, SequenceGatherAndReduceScatter) {
  const DType dt = GetParam();
  auto world = testing::test_world();
  for (int t : tp_sizes(world->size(), kRegionSizes)) {
    SCOPED_TRACE("tp=" + std::to_string(t));
    auto tp = tp_group(*world, t);
    const int r = tp->rank();
    const int64_t block = kBlock * kWidth, full_n = t * block;  // local [3, 5], full [3t, 5]
    for (bool async : {false, true}) {
      SCOPED_TRACE(async ? "async" : "blocking");
      Tensor local = host_tensor(block, dt).reshape({kBlock, kWidth});
      Tensor full = host_tensor(full_n, dt).reshape({t * kBlock, kWidth});
      // ḡ forward (= ḡ* backward): full is the token blocks of ranks 0..t-1, in order.
      auto expect_gathered = [&](const char* what) {
        EXPECT_EQ(mismatches(full, [&](int64_t i) { return input(static_cast<int>(i / block), i % block); }), "")
            << what;
      };
      fill(local, [&](int64_t i) { return input(r, i); });
      if (async)
        tp::gather_from_sequence_region_forward_async(*tp, local, full)->wait();
      else
        tp::gather_from_sequence_region_forward(*tp, local, full);
      expect_gathered("gather_from_sequence_region forward");
      fill(full, [](int64_t) { return -99.0; });
      if (async)
        tp::reduce_scatter_to_sequence_region_backward_async(*tp, local, full)->wait();
      else
        tp::reduce_scatter_to_sequence_region_backward(*tp, local, full);
      expect_gathered("reduce_scatter_to_sequence_region backward");

      // ḡ* forward (= ḡ backward): local is this rank's token block of the sum over ranks.
      auto expect_scattered = [&](const char* what) {
        EXPECT_EQ(mismatches(local, [&](int64_t i) { return sum_over(t, r * block + i); }), "") << what;
      };
      fill(full, [&](int64_t i) { return input(r, i); });
      if (async)
        tp::reduce_scatter_to_sequence_region_forward_async(*tp, full, local)->wait();
      else
        tp::reduce_scatter_to_sequence_region_forward(*tp, full, local);
      expect_scattered("reduce_scatter_to_sequence_region forward");
      fill(full, [&](int64_t i) { return input(r, i); });
      fill(local, [](int64_t) { return -99.0; });
      if (async)
        tp::gather_from_sequence_region_backward_async(*tp, full, local)->wait();
      else
        tp::gather_from_sequence_region_backward(*tp, full, local);
      expect_scattered("gather_from_sequence_region backward");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TpRegions, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return dtype_name(info.param); });

// N not divisible by tp, or a local block of the wrong size: the same error on every rank, thrown
// before any communication (the barrier inside expect_same_error_everywhere would hang otherwise).
TEST(TpRegionErrors, SequenceSplitNeedsDivisibleTokens) {
  auto world = testing::test_world();
  for (int t : tp_sizes(world->size(), kRegionSizes)) {
    if (t == 1) continue;
    SCOPED_TRACE("tp=" + std::to_string(t));
    auto tp = tp_group(*world, t);
    Tensor full = host_tensor((t + 1) * kWidth, DType::F32).reshape({t + 1, kWidth});
    Tensor local = host_tensor(kWidth, DType::F32).reshape({1, kWidth});
    const std::string split = "does not divide " + std::to_string(t + 1);
    expect_same_error_everywhere(*world, split, [&] { tp::gather_from_sequence_region_forward(*tp, local, full); });
    expect_same_error_everywhere(*world, split,
                                 [&] { tp::reduce_scatter_to_sequence_region_forward(*tp, full, local); });
    Tensor even = host_tensor(2 * t * kWidth, DType::F32).reshape({2 * t, kWidth});
    expect_same_error_everywhere(*world, "is not 1/" + std::to_string(t),
                                 [&] { tp::gather_from_sequence_region_backward(*tp, even, local); });
  }
}

}  // namespace
}  // namespace tripod::testing
