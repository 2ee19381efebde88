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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/flash_backward_warp.h"
#include "core/error.h"

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

// Written as c_attn's bf16 operand (store_operand_rows): every element the rounding of the fp32
// gradient, and the bias gradient's partial sums, every one written (NaN before), each the column
// sum of its warp's 16 rows (rows past T none): sums of the same fp32 values in the butterfly's
// order, so within a few fp32 ulps of a plain sum of those rows, and their total over the rows
// likewise the column sums of dqkv.
void check_operand(const Shape& s) {
  SCOPED_TRACE(s.text());
  namespace fm = flash_mma;
  const std::vector<float> qkv = normals(static_cast<std::size_t>(s.batch * s.seq_len * 3 * s.channels), 5, 1.5f);
  const std::vector<float> dout = normals(static_cast<std::size_t>(s.batch * s.seq_len * s.channels), 6, 1.0f);
  std::vector<float> out(dout.size());
  std::vector<float> state(static_cast<std::size_t>(s.batch * s.n_head * s.seq_len) + out.size());
  cpu::flash_attention_forward(out.data(), state.data(), qkv.data(), s.batch, s.seq_len, s.channels, s.n_head);
  std::vector<float> dqkv(qkv.size(), NAN);
  cpu::flash_attention_backward_mma(dqkv.data(), dout.data(), qkv.data(), state.data(), s.batch, s.seq_len,
                                    s.channels, s.n_head);
  const flash::Problem p{s.batch, s.seq_len, s.channels, s.n_head, 0.0f};
  const int64_t cols = 3 * s.channels, groups = fm::column_sum_rows(p) / s.batch;  // 16-row groups a sequence
  std::vector<bf16> dqkv16(qkv.size(), bf16{0x7FC1});
  std::vector<float> partials(static_cast<std::size_t>(fm::column_sum_rows(p) * cols), NAN);
  cpu::flash_attention_backward_mma(nullptr, dout.data(), qkv.data(), state.data(), s.batch, s.seq_len, s.channels,
                                    s.n_head, dqkv16.data(), partials.data());
  for (std::size_t i = 0; i < dqkv.size(); ++i)
    ASSERT_EQ(dqkv16[i].bits, float_to_bf16_bits(dqkv[i])) << "dqkv16[" << i << "]";
  double worst = 0, largest = 0;
  std::vector<double> total(static_cast<std::size_t>(cols), 0.0), direct(static_cast<std::size_t>(cols), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < cols; ++c) {
        const float got = partials[static_cast<std::size_t>((b * groups + g) * cols + c)];
        ASSERT_TRUE(std::isfinite(got)) << "partial sum (" << b << ", " << g << ", " << c << ") not written";
        double want = 0;
        for (int64_t t = 16 * g; t < std::min<int64_t>(16 * g + 16, s.seq_len); ++t)
          want += dqkv[static_cast<std::size_t>((b * s.seq_len + t) * cols + c)];
        worst = std::max(worst, std::fabs(got - want));
        largest = std::max(largest, std::fabs(want));
        total[static_cast<std::size_t>(c)] += got;
        direct[static_cast<std::size_t>(c)] += want;
      }
  EXPECT_LE(worst, 1e-5 * std::max(largest, 1.0));
  for (int64_t c = 0; c < cols; ++c)
    EXPECT_NEAR(total[static_cast<std::size_t>(c)], direct[static_cast<std::size_t>(c)], 1e-4) << "column " << c;
}

TEST(FlashBackwardWarp, WritesTheGradientAsItsBf16OperandWithTheBiasGradientsPartialSums) {
  check_operand({2, 17, 32, 2});    // head size 16, one partial tile: groups past T sum nothing
  check_operand({1, 97, 64, 2});    // 32
  check_operand({2, 130, 128, 2});  // 64: three tiles, the last of 2 rows
  // dqkv in fp32 or as the operand, not both, nor the operand without its sums
  const std::vector<float> x(2 * 17 * 96, 0.0f), st(2 * 2 * 17 + 2 * 17 * 32, 0.0f);
  std::vector<float> dqkv(x.size()), partials(1000);
  std::vector<bf16> dqkv16(x.size());
  EXPECT_THROW(cpu::flash_attention_backward_mma(dqkv.data(), x.data(), x.data(), st.data(), 2, 17, 32, 2,
                                                 dqkv16.data(), partials.data()),
               Error);
  EXPECT_THROW(cpu::flash_attention_backward_mma(nullptr, x.data(), x.data(), st.data(), 2, 17, 32, 2, dqkv16.data()),
               Error);
}

TEST(FlashBackwardWarp, HeadSize128TakesTheBlockAlgorithms) {
  EXPECT_TRUE(flash_mma::register_backward_head_dim(64));
  EXPECT_FALSE(flash_mma::register_backward_head_dim(128));
  check_bit_for_bit({1, 130, 128, 1});  // the fallback: the same function, trivially the same bits
}

}  // namespace
}  // namespace tripod::kernels
