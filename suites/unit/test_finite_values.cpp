// A checkpoint never holds an infinity or a NaN (ckpt/finite_values.h): the scan's bit test against
// std::isfinite in each dtype, and the writer refusing such a region before writing any of it.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>

#include "ckpt/finite_values.h"
#include "ckpt/shard_file.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace tripod::ckpt {
namespace {
namespace fs = std::filesystem;

template <typename T>
NonFiniteValues scan(const std::vector<T>& v, DType dtype) {
  return find_nonfinite(reinterpret_cast<const std::byte*>(v.data()), static_cast<int64_t>(v.size()), dtype);
}

// The values next to the boundary: the largest finite, the smallest subnormal, -0; and each kind of
// non-finite value (a NaN with a payload, a negative NaN). The bit test must agree with isfinite.
template <typename T>
void check_boundaries(DType dtype) {
  using limits = std::numeric_limits<T>;
  std::vector<T> v = {T(1), limits::max(), -limits::max(), limits::denorm_min(), T(-0.0), limits::lowest()};
  EXPECT_EQ(scan(v, dtype).count, 0);
  EXPECT_EQ(scan(v, dtype).first, -1);
  v.insert(v.begin() + 2, limits::infinity());
  v.push_back(-limits::quiet_NaN());
  v.push_back(-limits::infinity());
  v.push_back(limits::signaling_NaN());
  const NonFiniteValues found = scan(v, dtype);
  int64_t expected = 0;
  for (T x : v) expected += !std::isfinite(x);
  EXPECT_EQ(found.count, expected);
  EXPECT_EQ(found.count, 4);
  EXPECT_EQ(found.first, 2);
  EXPECT_EQ(found.first_value, limits::infinity());
}

TEST(CheckpointFiniteValues, Fp32AndFp64AgreeWithIsfinite) {
  check_boundaries<float>(DType::F32);
  check_boundaries<double>(DType::F64);
}

TEST(CheckpointFiniteValues, Bf16ByItsBits) {
  // 0x7f7f: bf16's largest finite value; 0x7f80: +inf; 0xffc1: a negative NaN with a payload.
  const std::vector<uint16_t> bits = {0x3f80, 0x7f7f, 0xff7f, 0x0001, 0x7f80, 0xffc1, 0x8000};
  for (std::size_t i = 0; i < bits.size(); ++i)
    EXPECT_EQ(std::isfinite(bf16_to_float(bf16{bits[i]})), i < 4 || i == 6) << i;
  const NonFiniteValues found = scan(bits, DType::BF16);
  EXPECT_EQ(found.count, 2);
  EXPECT_EQ(found.first, 4);
  EXPECT_TRUE(std::isinf(found.first_value));
  const std::vector<int32_t> ids = {0x7f800000, -1};  // token ids: no value of theirs is a float
  EXPECT_EQ(scan(ids, DType::I32).count, 0);
}

TEST(CheckpointFiniteValues, TheFirstIsNamedByItsLogicalElement) {
  Block block;
  block.start = 10;
  block.length = 4;
  block.stride = 100;
  block.count = 3;
  EXPECT_EQ(block_logical_element(block, 0), 10);
  EXPECT_EQ(block_logical_element(block, 3), 13);
  EXPECT_EQ(block_logical_element(block, 4), 110);
  EXPECT_EQ(block_logical_element(block, 9), 211);
  EXPECT_EQ(describe_nonfinite("wte.weight", "adam_v", {2, 9, std::nan("")}, 211),
            "tensor 'wte.weight' (adam_v) holds 2 infinite or NaN values (the first: element 211, nan)");
}

TEST(CheckpointFiniteValues, TheWriterRefusesARegionHoldingOneAndWritesNone) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_test_finite_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Local [0, 6) holds logical [20, 23) and [40, 43) of a 64-element tensor; local 6 and 7 are padding,
  // where a NaN is no state (a vocabulary shard's rows past the vocabulary).
  std::vector<float> values = {1, 2, 3, 4, 5, 6, std::nanf(""), std::nanf("")};
  const StateRegion region{"h.0.mlp.c_fc.bias", {64}, "adam_m", host_view(values.data(), {8}, DType::F32),
                           {{0, 20, 3}, {3, 40, 3}}};
  {
    ShardWriter writer(dir, 1, 7);
    writer.add(region, reinterpret_cast<const std::byte*>(values.data()));  // the padding is not saved
    values[4] = std::numeric_limits<float>::infinity();
    values[5] = std::nanf("");
    try {
      writer.add(region, reinterpret_cast<const std::byte*>(values.data()));
      FAIL() << "a region holding an infinity was written";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "rank 1's tensor 'h.0.mlp.c_fc.bias' (adam_m) holds 2 infinite or NaN values (the first: "
                   "element 41, inf) after step 7's update (training diverged): a state that trains into NaN is not saved");
    }
  }
  EXPECT_TRUE(fs::is_empty(dir));  // the unfinished file is removed
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tripod::ckpt
