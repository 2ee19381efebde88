// The register-resident flash backward (backend/kernels/flash_backward_warp.h, the CUDA kernels of
// TRIPOD_CUDA_ATTENTION=flash-mma at head sizes up to 64) replayed on the host by the warp executor
// (backend/cpu/flash_host_warp.h), against flash_attention_backward.h's block algorithms (the flash
// kernels, checked against the CPU backend in test_flash_attention_block.cpp).
//
// Both take the same products in the same order on the host (each gradient over its 64-row tiles
// in order, each tile's rows in order; every product a sum in k's order) and round at the same
// points, so dq, dk and dv are the block algorithms' bit for bit: a wrong fragment index, mask,
// transposition or tile bound shows as any difference at all. The forward's state comes from the
// block algorithms' forward, so that both backwards read the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/flash_backward_warp.h"

namespace tripod::kernels {
namespace {

struct Shape {
  int64_t batch, seq_len, channels, n_head;
  std::string text() const {
    return "B" + std::to_string(batch) + " T" + std::to_string(seq_len) + " C" + std::to_string(channels) + " H" +
           std::to_string(n_head);
  }
};

std::vector<float> normals(std::size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void check_bit_for_bit(const Shape& s) {
  SCOPED_TRACE(s.text());
  const std::vector<float> qkv = normals(static_cast<std::size_t>(s.batch * s.seq_len * 3 * s.channels), 3, 1.5f);
  const std::vector<float> dout = normals(static_cast<std::size_t>(s.batch * s.seq_len * s.channels), 4, 1.0f);
  std::vector<float> out(dout.size());
  std::vector<float> state(static_cast<std::size_t>(s.batch * s.n_head * s.seq_len) + out.size());
  cpu::flash_attention_forward(out.data(), state.data(), qkv.data(), s.batch, s.seq_len, s.channels, s.n_head);
  std::vector<float> want(qkv.size(), NAN), got(qkv.size(), NAN);  // every element must be written
  cpu::flash_attention_backward(want.data(), dout.data(), qkv.data(), state.data(), s.batch, s.seq_len, s.channels,
                                s.n_head);
  cpu::flash_attention_backward_mma(got.data(), dout.data(), qkv.data(), state.data(), s.batch, s.seq_len,
                                    s.channels, s.n_head);
  int64_t differ = 0, first = -1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "dqkv[" << i << "] not written, or NaN";
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ++differ;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(differ, 0) << "first at " << first << ": " << got[static_cast<std::size_t>(first < 0 ? 0 : first)]
                       << " vs " << want[static_cast<std::size_t>(first < 0 ? 0 : first)];
}

TEST(FlashBackwardWarp, GivesTheBlockAlgorithmsGradientsBitForBit) {
  check_bit_for_bit({2, 17, 32, 2});    // head size 16, one partial tile
  check_bit_for_bit({1, 97, 64, 2});    // 32: a full tile and a partial one
  check_bit_for_bit({2, 130, 128, 2});  // 64 (GPT-2's): three tiles, the last of 2 rows
  check_bit_for_bit({1, 128, 64, 1});   // exact tiles
}

TEST(FlashBackwardWarp, HeadSize128TakesTheBlockAlgorithms) {
  EXPECT_TRUE(flash_mma::register_backward_head_dim(64));
  EXPECT_FALSE(flash_mma::register_backward_head_dim(128));
  check_bit_for_bit({1, 130, 128, 1});  // the fallback: the same function, trivially the same bits
}

}  // namespace
}  // namespace tripod::kernels
