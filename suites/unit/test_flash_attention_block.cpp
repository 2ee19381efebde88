// The tiled attention of backend/kernels/flash_attention_block.h (the CUDA backend's flash
// attention kernels), run on the host block by block with a host executor, against the CPU
// backend's bf16-operand attention (cpu/attention_kernels.cpp).
//
// The executor (backend/cpu/flash_host_block.h, also the emulated device's) runs each phase for
// every thread in turn and multiplies the tiles with a plain loop (products of bf16 values, exact
// in fp32, summed in fp32), the same operands in the same shared-memory layout that the device's
// tensor-core loads read. Shared memory is filled with NaN
// before every block, as a stand-in for the device's uninitialised shared memory: a phase that
// reads what no earlier phase wrote turns a result into NaN. Each block runs twice, each loop's
// threads ascending and descending: a loop in which one thread reads what another writes (a race
// on the device) gives other bits one way than the other. A barrier missing between two loops is
// not seen here (the host ends one loop before it starts the next); the GPU's racecheck sees it.
//
// Tolerance, relative to each output's largest element (out; dq, dk and dv separately): 2^-8, as
// check-backend's bf16-operand attention case. Both sides round q, k, v and dout to bf16 and the
// score gradients after the scale; they round the probabilities at different points (the CPU the
// normalised ones, the tiles exp(s - running max) before the division), so results differ by
// about one bf16 rounding (2^-9) of the terms, and the order of the sums. A wrong index, stride,
// mask, tile bound or rescale moves a result by O(1). The measured differences are recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/flash_host_block.h"
#include "backend/cpu/kernels.h"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/flash_attention_backward.h"
#include "backend/kernels/flash_attention_block.h"
#include "kernel_math_test_util.h"
#include "support/error_text.h"

namespace tripod::kernels::flash {
namespace {

using tripod::testing::record_measure;
using tripod::testing::relative_difference;

constexpr double kBound = 1.0 / 256;

using HostBlock = cpu::FlashHostBlock;

template <class Shared>
std::unique_ptr<Shared> poisoned_shared() {
  auto sh = std::make_unique<Shared>();
  std::memset(static_cast<void*>(sh.get()), 0xFF, sizeof(Shared));  // NaN in fp32 and in bf16
  return sh;
}

struct Shape {
  int64_t batch, seq_len, channels, n_head;
  std::string text() const {
    return "B" + std::to_string(batch) + " T" + std::to_string(seq_len) + " C" + std::to_string(channels) + " H" +
           std::to_string(n_head);
  }
};

struct Result {
  std::vector<float> out, out_copy, lse, dqkv;
};

template <int HD>
Result run_tiles(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
                 bool descending = false) {
  const Problem p{s.batch, s.seq_len, s.channels, s.n_head, attention_scale<float>(HD)};
  HostBlock exec;
  exec.descending = descending;
  Result r;
  r.out.assign(static_cast<std::size_t>(s.batch * s.seq_len * s.channels), NAN);
  r.out_copy = r.out;
  r.lse.assign(static_cast<std::size_t>(p.pairs() * s.seq_len), NAN);
  r.dqkv.assign(qkv.size(), NAN);  // every element must be written
  const int64_t blocks = p.pairs() * p.tiles();
  for (int64_t block = 0; block < blocks; ++block) {
    const BlockPlace at = place_of_block(block, p, true);
    auto sh = poisoned_shared<ForwardShared<HD>>();
    forward_block<HD>(exec, *sh, p, qkv.data(), r.out.data(), r.out_copy.data(), r.lse.data(), at.pair, at.tile);
  }
  EXPECT_TRUE(tripod::testing::bits_equal(r.out_copy, r.out)) << "the kept copy of out";
  std::vector<float> delta(r.lse.size());
  for (int64_t row = 0; row < p.pairs() * s.seq_len; ++row)
    delta[static_cast<std::size_t>(row)] = delta_of_row(p, dout.data(), r.out.data(), row);
  for (int64_t block = 0; block < blocks; ++block) {
    const BlockPlace keys = place_of_block(block, p, false);
    auto keys_sh = poisoned_shared<KeyGradsShared<HD>>();
    key_grads_block<HD>(exec, *keys_sh, p, qkv.data(), dout.data(), r.lse.data(), delta.data(), r.dqkv.data(), keys.pair,
                        keys.tile);
    const BlockPlace queries = place_of_block(block, p, true);
    auto sh = poisoned_shared<BackwardShared<HD>>();
    query_grads_block<HD>(exec, *sh, p, qkv.data(), dout.data(), r.lse.data(), delta.data(), r.dqkv.data(),
                          queries.pair, queries.tile);
  }
  return r;
}

// Part `part` (0 q, 1 k, 2 v) of a [B,T,3C] tensor.
std::vector<float> third(const std::vector<float>& x, const Shape& s, int part) {
  std::vector<float> y;
  for (int64_t n = 0; n < s.batch * s.seq_len; ++n)
    for (int64_t c = 0; c < s.channels; ++c)
      y.push_back(x[static_cast<std::size_t>(n * 3 * s.channels + part * s.channels + c)]);
  return y;
}

template <int HD>
void expect_tiles_match_the_cpu(const Shape& s) {
  SCOPED_TRACE(s.text());
  ASSERT_EQ(s.channels / s.n_head, HD);
  const int64_t n = s.batch * s.seq_len;
  const auto qkv = tripod::testing::uniform_values<float>(n * 3 * s.channels, 11, "qkv", -2, 2);
  const auto dout = tripod::testing::uniform_values<float>(n * s.channels, 12, "dout", -1, 1);
  std::vector<float> out(static_cast<std::size_t>(n * s.channels)), dqkv(qkv.size());
  std::vector<float> probs(static_cast<std::size_t>(s.batch * s.n_head * s.seq_len * s.seq_len));
  cpu::attention_forward(out.data(), probs.data(), qkv.data(), s.batch, s.seq_len, s.channels, s.n_head, true);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), probs.data(), s.batch, s.seq_len, s.channels,
                          s.n_head, true);
  const Result tiles = run_tiles<HD>(s, qkv, dout);
  // Every loop's threads in the other order: the same bits, or one thread of a loop reads what
  // another writes.
  const Result reversed = run_tiles<HD>(s, qkv, dout, true);
  EXPECT_TRUE(tripod::testing::bits_equal(reversed.out, tiles.out)) << "out: threads' order matters";
  EXPECT_TRUE(tripod::testing::bits_equal(reversed.lse, tiles.lse)) << "lse: threads' order matters";
  EXPECT_TRUE(tripod::testing::bits_equal(reversed.dqkv, tiles.dqkv)) << "dqkv: threads' order matters";

  const double out_diff = relative_difference(tiles.out, out);
  record_measure("out " + s.text(), out_diff);
  EXPECT_LE(out_diff, kBound) << "out";
  const char* names[] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    const double diff = relative_difference(third(tiles.dqkv, s, part), third(dqkv, s, part));
    record_measure(std::string(names[part]) + " " + s.text(), diff);
    EXPECT_LE(diff, kBound) << names[part];
  }
  // lse: log sum_j<=t exp(scale * q_t . k_j) over the rounded q and k, in fp64.
  const auto rounded = [](float x) { return static_cast<double>(bf16_bits_to_float(float_to_bf16_bits(x))); };
  const double scale = attention_scale<float>(HD);
  double lse_diff = 0;
  for (int64_t bh = 0; bh < s.batch * s.n_head; ++bh)
    for (int64_t t = 0; t < s.seq_len; ++t) {
      const int64_t b = bh / s.n_head, h = bh % s.n_head;
      const float* q = qkv.data() + (b * s.seq_len + t) * 3 * s.channels + h * HD;
      double sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        const float* k = qkv.data() + (b * s.seq_len + j) * 3 * s.channels + s.channels + h * HD;
        double dot = 0;
        for (int d = 0; d < HD; ++d) dot += rounded(q[d]) * rounded(k[d]);
        sum += std::exp(scale * dot);
      }
      lse_diff = std::max(lse_diff, std::fabs(std::log(sum) - tiles.lse[static_cast<std::size_t>(bh * s.seq_len + t)]));
    }
  record_measure("lse " + s.text(), lse_diff);
  EXPECT_LE(lse_diff, 1e-4) << "lse (absolute)";
}

TEST(FlashAttentionBlock, HeadSize16MatchesTheCpuAcrossPartialTiles) { expect_tiles_match_the_cpu<16>({2, 100, 64, 4}); }
TEST(FlashAttentionBlock, HeadSize32MatchesTheCpu) { expect_tiles_match_the_cpu<32>({2, 70, 64, 2}); }
TEST(FlashAttentionBlock, HeadSize64MatchesTheCpuOverThreeTiles) { expect_tiles_match_the_cpu<64>({1, 150, 128, 2}); }
TEST(FlashAttentionBlock, HeadSize128MatchesTheCpu) { expect_tiles_match_the_cpu<128>({1, 64, 128, 1}); }
TEST(FlashAttentionBlock, ASingleTokenAndAnExactTile) {
  expect_tiles_match_the_cpu<16>({3, 1, 32, 2});
  expect_tiles_match_the_cpu<16>({1, 128, 32, 2});
}

// The host executor holds every tile product to the layout the device's tensor-core loads need
// (32-byte aligned tiles, rows of whole 16 bytes, 16-deep products), so the replays above also
// check that the kernels' shared-memory layouts meet it; a layout that breaks it is named.
TEST(FlashAttentionBlock, TheHostExecutorRefusesALayoutTheTensorCoresCannotLoad) {
  struct alignas(128) Tiles {
    bf16 a[16 * 40], b[16 * 40];
    float c[16 * 24];
  };
  auto tiles = std::make_unique<Tiles>();
  std::memset(static_cast<void*>(tiles.get()), 0, sizeof(Tiles));
  const HostBlock exec;
  exec.product<false, true>(tiles->c, 24, false, tiles->a, 40, tiles->b, 40, 32);  // a layout that loads
  EXPECT_NE(expected_error([&] { exec.product<false, true>(tiles->c, 24, false, tiles->a + 8, 40, tiles->b, 40, 32); })
                .find("32-byte aligned"),
            std::string::npos);
  EXPECT_NE(expected_error([&] { exec.product<false, true>(tiles->c, 24, false, tiles->a, 36, tiles->b, 40, 32); })
                .find("leading dimension 36"),
            std::string::npos);
  EXPECT_NE(expected_error([&] { exec.product<false, true>(tiles->c, 22, false, tiles->a, 40, tiles->b, 40, 32); })
                .find("operand c"),
            std::string::npos);
  EXPECT_NE(expected_error([&] { exec.product<false, true>(tiles->c, 24, false, tiles->a, 40, tiles->b, 40, 24); })
                .find("depth 24"),
            std::string::npos);
}

TEST(FlashAttentionBlock, PlacesCoverEveryPairAndTileOnce) {
  const Problem p{3, 200, 64, 4, 0.25f};  // 12 pairs, 4 tiles
  for (bool heavy_last : {true, false}) {
    std::vector<int> seen(static_cast<std::size_t>(p.pairs() * p.tiles()));
    for (int64_t block = 0; block < p.pairs() * p.tiles(); ++block) {
      const BlockPlace at = place_of_block(block, p, heavy_last);
      ASSERT_GE(at.tile, 0);
      ASSERT_LT(at.tile, p.tiles());
      ++seen[static_cast<std::size_t>(at.pair * p.tiles() + at.tile)];
    }
    for (int count : seen) EXPECT_EQ(count, 1);
    EXPECT_EQ(place_of_block(0, p, heavy_last).tile, heavy_last ? p.tiles() - 1 : 0);
  }
}

}  // namespace
}  // namespace tripod::kernels::flash
