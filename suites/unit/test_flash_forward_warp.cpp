// The register-resident flash forward (backend/kernels/flash_forward_warp.h, the CUDA kernel of
// TRIPOD_CUDA_ATTENTION=flash-mma) replayed on the host, 32 lanes of a warp in lockstep
// (backend/cpu/flash_host_warp.h), against flash_attention_block.h's forward (the flash kernels,
// checked against the CPU backend in test_flash_attention_block.cpp).
//
// First the tensor-core fragment map (mma_fragments.h): every element of A, B and C held by exactly
// one lane's register half, and the host's emulated product equal to a plain one. Then the forward:
// its products take their fp32 sums in k's order on the host, as forward_block's host product
// does, and round at the same points (q, k, v and the probabilities to bf16), so the two agree but
// for the order of each row's sum of probabilities (one fp32 rounding, ~1e-7 relative): bound 1e-5
// of the largest output, logsumexp within 1e-5. A wrong fragment index, mask, bound or rescale
// moves a result by O(1). Shared memory is NaN before every block: reading a part of it no load
// wrote turns a result into NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/flash_host_warp.h"
#include "backend/cpu/kernels.h"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/flash_attention_block.h"
#include "backend/kernels/flash_forward_warp.h"
#include "backend/kernels/mma_fragments.h"
#include "kernel_math_test_util.h"

namespace tripod::kernels {
namespace {

using tripod::testing::record_measure;

TEST(MmaFragments, EveryElementOfEachOperandIsHeldByExactlyOneLane) {
  int a[mma::kM][mma::kK] = {}, b[mma::kK][mma::kN] = {}, c[mma::kM][mma::kN] = {};
  for (int lane = 0; lane < mma::kWarpLanes; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e) {
        const mma::Place at = mma::a_place(lane, r, e);
        ++a[at.row][at.col];
      }
    for (int r = 0; r < 2; ++r)
      for (int e = 0; e < 2; ++e) {
        const mma::Place at = mma::b_place(lane, r, e);
        ++b[at.row][at.col];
      }
    for (int i = 0; i < 4; ++i) {
      const mma::Place at = mma::c_place(lane, i);
      ++c[at.row][at.col];
    }
  }
  for (auto& row : a)
    for (int n : row) EXPECT_EQ(n, 1);
  for (auto& row : b)
    for (int n : row) EXPECT_EQ(n, 1);
  for (auto& row : c)
    for (int n : row) EXPECT_EQ(n, 1);
  // C's n-tiles 2k and 2k + 1 hold, lane for lane, A's registers of a 16-deep product over their
  // columns: what lets the probabilities feed the next product without leaving their lanes
  for (int lane = 0; lane < mma::kWarpLanes; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e) {
        const mma::Place a_at = mma::a_place(lane, r, e);
        const mma::Place c_at = mma::c_place(lane, (r & 1) * 2 + e);
        EXPECT_EQ(a_at.row, c_at.row);
        EXPECT_EQ(a_at.col, c_at.col + 8 * (r >> 1));  // registers 2, 3: the second n-tile
      }
}

TEST(MmaFragments, TheHostProductIsAPlainMatrixProduct) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  float am[16][16], bm[16][8], cm[16][8];
  for (auto& row : am)
    for (float& x : row) x = bf16_bits_to_float(float_to_bf16_bits(u(rng)));
  for (auto& row : bm)
    for (float& x : row) x = bf16_bits_to_float(float_to_bf16_bits(u(rng)));
  for (auto& row : cm)
    for (float& x : row) x = u(rng);
  using Warp = cpu::FlashHostWarp;
  uint32_t a[Warp::kLanes][4], b[Warp::kLanes][2];
  float c[Warp::kLanes][4];
  for (int lane = 0; lane < Warp::kLanes; ++lane) {
    for (int r = 0; r < 4; ++r) {
      const mma::Place lo = mma::a_place(lane, r, 0), hi = mma::a_place(lane, r, 1);
      a[lane][r] = float_pair_to_bf16_word(am[lo.row][lo.col], am[hi.row][hi.col]);
    }
    for (int r = 0; r < 2; ++r) {
      const mma::Place lo = mma::b_place(lane, r, 0), hi = mma::b_place(lane, r, 1);
      b[lane][r] = float_pair_to_bf16_word(bm[lo.row][lo.col], bm[hi.row][hi.col]);
    }
    for (int i = 0; i < 4; ++i) c[lane][i] = cm[mma::c_place(lane, i).row][mma::c_place(lane, i).col];
  }
  Warp{}.mma(c, 0, a, 0, b);
  for (int lane = 0; lane < Warp::kLanes; ++lane)
    for (int i = 0; i < 4; ++i) {
      const mma::Place at = mma::c_place(lane, i);
      float want = cm[at.row][at.col];
      for (int k = 0; k < 16; ++k) want += am[at.row][k] * bm[k][at.col];
      EXPECT_EQ(c[lane][i], want) << "lane " << lane << " element " << i;
    }
}

TEST(MmaFragments, QuadReductionsTakeTheDevicesButterflyOrder) {
  using Warp = cpu::FlashHostWarp;
  float x[Warp::kLanes][2];
  for (int lane = 0; lane < Warp::kLanes; ++lane)
    x[lane][0] = x[lane][1] = 1.0f + 1e-7f * static_cast<float>(lane * lane);
  Warp{}.quad_sum(x, 1);
  Warp{}.quad_max(x, 0);
  for (int lane = 0; lane < Warp::kLanes; ++lane) {
    const int q = lane & ~3;
    auto v = [&](int l) { return 1.0f + 1e-7f * static_cast<float>(l * l); };
    EXPECT_EQ(x[lane][1], (v(lane) + v(lane ^ 1)) + (v(lane ^ 2) + v(lane ^ 3)));
    EXPECT_EQ(x[lane][0], v(q + 3));  // the group's largest
  }
}

// x rounded to bf16 element for element: the copy the kernels' launchers make of qkv and dout.
std::vector<bf16> bf16_copy(const std::vector<float>& x) {
  std::vector<bf16> copy(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) copy[i].bits = float_to_bf16_bits(x[i]);
  return copy;
}

// The tile loads read the bf16 copies (flash_warp_tiles.h): a tile row-major and transposed, and a
// warp's A fragments, hold exactly bf16(x) of the fp32 source (what the products rounded to when the
// loads rounded), +0 past the rows given; the padding of the shared rows is left as it was.
TEST(FlashWarpTiles, TileLoadsHoldTheSourceRoundedToBf16AndZerosPastTheRows) {
  constexpr int HD = 32, kLd = 3 * 2 * HD;  // rows as qkv's of two heads of 32: a row stride of 3C
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<float> src(static_cast<std::size_t>(flash_mma::kTile * kLd));
  for (float& x : src) x = n(rng);
  const std::vector<bf16> copy = bf16_copy(src);
  const int rows = 37, col0 = HD;  // the second head; rows past 37 are zeros
  std::vector<bf16> row_major(flash_mma::kTile * flash_mma::row_ld(HD), bf16{0x7FC1});
  std::vector<bf16> transposed(HD * flash_mma::kColumnLd, bf16{0x7FC1});
  for (int thread = 0; thread < flash_mma::kThreads; ++thread)
    flash_mma::load_tile<HD>(thread, row_major.data(), transposed.data(), copy.data() + col0, kLd, rows);
  for (int r = 0; r < flash_mma::kTile; ++r)
    for (int d = 0; d < flash_mma::row_ld(HD); ++d) {
      const uint16_t want = d >= HD ? 0x7FC1 : r < rows ? float_to_bf16_bits(src[r * kLd + col0 + d]) : 0;
      ASSERT_EQ(row_major[r * flash_mma::row_ld(HD) + d].bits, want) << "row " << r << " column " << d;
      if (d < HD) ASSERT_EQ(transposed[d * flash_mma::kColumnLd + r].bits, want) << "row " << r << " column " << d;
    }
  // A fragments of 16 rows from row 24: rows 24..36 the source's pairs, rows past T = 37 zeros.
  uint32_t a[cpu::FlashHostWarp::kLanes][HD / mma::kK * 4];
  flash_mma::load_row_fragments<HD>(cpu::FlashHostWarp{}, a, copy.data() + col0, kLd, 24, rows);
  for (int lane = 0; lane < mma::kWarpLanes; ++lane)
    for (int kk = 0; kk < HD / mma::kK; ++kk)
      for (int r = 0; r < 4; ++r) {
        const mma::Place at = mma::a_place(lane, r, 0);
        const int row = 24 + at.row, col = col0 + kk * mma::kK + at.col;
        const uint32_t want = row < rows ? float_pair_to_bf16_word(src[row * kLd + col], src[row * kLd + col + 1]) : 0u;
        ASSERT_EQ(a[lane][kk * 4 + r], want) << "lane " << lane << " register " << kk * 4 + r;
      }
}

TEST(FlashWarpTiles, RotatingTheElementsOfAGroupMovesElementKPlusEToE) {
  uint32_t in[4];
  for (int j = 0; j < 4; ++j) in[j] = static_cast<uint32_t>(2 * j + 1) << 16 | static_cast<uint32_t>(2 * j);
  for (int k = 0; k < 16; ++k) {  // a head size of 128 has 16 groups a row
    uint32_t w[4] = {in[0], in[1], in[2], in[3]};
    flash_mma::rotate_elements(w, k);
    for (int e = 0; e < 8; ++e) EXPECT_EQ(flash_mma::element_of(w, e).bits, (e + k) % 8) << "k " << k << " e " << e;
  }
}

// VisibleColumns (the backward's masks): element x of a lane sees its tile column exactly when the
// column lies in [first, last], however far outside the tile the bounds lie (clamped, no overflow).
TEST(FlashWarpTiles, VisibleColumnsAreTheColumnsBetweenTheBounds) {
  const int64_t bounds[] = {-5000000000LL, -64, -2, -1, 0, 1, 7, 8, 30, 57, 62, 63, 64, 65, 5000000000LL};
  for (int lane = 0; lane < mma::kWarpLanes; ++lane)
    for (int64_t first : bounds)
      for (int64_t last : bounds) {
        const flash_mma::VisibleColumns v = flash_mma::visible_columns(lane, {first, 0}, {last, 63});
        for (int x = 0; x < flash_mma::kTiles8 * 4; ++x) {
          const int column = mma::c_place(lane, x % 4).col + x / 4 * mma::kN;
          ASSERT_EQ(column, flash_mma::fragment_column_offset(x) + 2 * mma::thread_in_group(lane));
          ASSERT_EQ(v.sees(0, flash_mma::fragment_column_offset(x)), column >= first && column <= last)
              << "lane " << lane << " x " << x << " [" << first << ", " << last << "]";
          ASSERT_TRUE(v.sees(1, flash_mma::fragment_column_offset(x)));  // the other half's [0, 63]
        }
      }
}

// The most distinct 32-bit words one bank serves in a warp's transposed tile stores, over every
// store of a tile load (shared memory serves one word a bank a cycle; two lanes writing halves of one
// word do not conflict). `rotated`: the stores as load_tile makes them; false: element e at step e.
template <int HD>
int transposed_store_ways(bool rotated) {
  namespace fm = flash_mma;
  int worst = 0;
  for (int warp = 0; warp < fm::kWarps; ++warp)
    for (int i = 0; i * fm::kThreads < fm::kTile * HD / 8; ++i)
      for (int e = 0; e < 8; ++e) {
        std::vector<std::vector<int>> words_of_bank(32);
        for (int lane = 0; lane < mma::kWarpLanes; ++lane) {
          const fm::TileGroup at = fm::tile_group<HD>(i * fm::kThreads + warp * mma::kWarpLanes + lane);
          const int column = at.col + (rotated ? fm::transposed_element_at_step(at.col, e) : e);
          const int word = (column * fm::kColumnLd + at.row) / 2;
          auto& words = words_of_bank[static_cast<std::size_t>(word % 32)];
          if (std::find(words.begin(), words.end(), word) == words.end()) words.push_back(word);
        }
        for (const auto& words : words_of_bank) worst = std::max(worst, static_cast<int>(words.size()));
      }
  return worst;
}

TEST(FlashWarpTiles, TransposedTileStoresAreConflictFreeAtHeadSize64) {
  EXPECT_EQ(transposed_store_ways<64>(true), 1);
  EXPECT_EQ(transposed_store_ways<32>(true), 1);
  EXPECT_EQ(transposed_store_ways<16>(true), 2);
  EXPECT_EQ(transposed_store_ways<128>(true), 2);
  // what the rotation removes: a row's 8 groups in one bank
  EXPECT_EQ(transposed_store_ways<64>(false), 8);
  EXPECT_EQ(transposed_store_ways<128>(false), 16);
}

struct Shape {
  int64_t batch, seq_len, channels, n_head;
  std::string text() const {
    return "B" + std::to_string(batch) + " T" + std::to_string(seq_len) + " C" + std::to_string(channels) + " H" +
           std::to_string(n_head);
  }
};

struct Forward {
  std::vector<float> out, state;  // state: lse [B*H*T], then the kept copy of out
  std::vector<bf16> out16;        // out's bf16 rounding (the attention's GEMM operand), written beside it
};

// flash_forward_warp.h block by block, shared memory NaN before each, as the kernel runs it.
template <int HD>
Forward run_warps(const Shape& s, const std::vector<float>& qkv32) {
  namespace fm = flash_mma;
  const std::vector<bf16> qkv = bf16_copy(qkv32);
  const flash::Problem p{s.batch, s.seq_len, s.channels, s.n_head, attention_scale<float>(HD)};
  Forward r;
  r.out.assign(static_cast<std::size_t>(s.batch * s.seq_len * s.channels), NAN);
  r.state.assign(static_cast<std::size_t>(p.pairs() * s.seq_len + s.batch * s.seq_len * s.channels), NAN);
  r.out16.assign(r.out.size(), bf16{0x7FC1});  // a NaN that no rounding writes
  auto shared = std::make_unique<fm::Shared<HD>>();
  auto warps = std::make_unique<fm::WarpState<HD, cpu::FlashHostWarp::kLanes>[]>(fm::kWarps);
  const cpu::FlashHostWarp w;
  for (int64_t block = 0; block < p.pairs() * p.tiles(); ++block) {
    std::memset(static_cast<void*>(shared.get()), 0xFF, sizeof(fm::Shared<HD>));
    const flash::BlockPlace at = flash::place_of_block(block, p, true);
    const int64_t row0 = at.tile * flash::kTile;
    for (int warp = 0; warp < fm::kWarps; ++warp)
      fm::start_rows<HD>(w, warps[warp], p, qkv.data(), at.pair, row0 + warp * fm::kRowsPerWarp);
    for (int64_t kt = 0; kt <= at.tile; ++kt) {
      for (int thread = 0; thread < fm::kThreads; ++thread)
        fm::load_key_tile<HD>(thread, *shared, p, qkv.data(), at.pair, kt * flash::kTile, p.rows_in_tile(kt));
      for (int warp = 0; warp < fm::kWarps; ++warp) {  // the diagonal tile masked, as the kernel peels it
        const int64_t rows = row0 + warp * fm::kRowsPerWarp;
        if (kt < at.tile) fm::forward_tile<HD, false>(w, warps[warp], *shared, p, rows, kt * flash::kTile);
        else fm::forward_tile<HD, true>(w, warps[warp], *shared, p, rows, kt * flash::kTile);
      }
    }
    for (int warp = 0; warp < fm::kWarps; ++warp)
      fm::finish_rows<HD>(w, warps[warp], p, r.out.data(), r.out16.data(), r.state.data() + p.pairs() * s.seq_len,
                          r.state.data(), at.pair, row0 + warp * fm::kRowsPerWarp);
  }
  return r;
}

std::vector<float> random_qkv(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.5f);  // scores of a few units: a peaked softmax too
  std::vector<float> qkv(static_cast<std::size_t>(s.batch * s.seq_len * 3 * s.channels));
  for (float& x : qkv) x = n(rng);
  return qkv;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

template <int HD>
void check_against_flash(const Shape& s) {
  SCOPED_TRACE(s.text());
  const std::vector<float> qkv = random_qkv(s, static_cast<uint32_t>(s.seq_len * 31 + HD));
  const Forward warps = run_warps<HD>(s, qkv);
  // the emulated device's driver (flash_attention_host.cpp) gives these bits too
  Forward driver{std::vector<float>(warps.out.size(), NAN), std::vector<float>(warps.state.size(), NAN), {}};
  cpu::flash_attention_forward_mma(driver.out.data(), driver.state.data(), qkv.data(), s.batch, s.seq_len, s.channels,
                                   s.n_head);
  // and, asked for the operand alone (out null), its bf16 rounding and the same state
  Forward operand{{}, std::vector<float>(warps.state.size(), NAN), std::vector<bf16>(warps.out.size(), bf16{0x7FC1})};
  const std::vector<bf16> qkv16 = bf16_copy(qkv);
  cpu::flash_attention_forward_mma(nullptr, operand.state.data(), qkv16.data(), s.batch, s.seq_len, s.channels,
                                   s.n_head, operand.out16.data());
  Forward tiles{std::vector<float>(warps.out.size(), NAN), std::vector<float>(warps.state.size(), NAN), {}};
  cpu::flash_attention_forward(tiles.out.data(), tiles.state.data(), qkv.data(), s.batch, s.seq_len, s.channels,
                               s.n_head);
  const std::size_t lse_count = static_cast<std::size_t>(s.batch * s.n_head * s.seq_len);
  const double scale = max_abs(tiles.out);
  double worst_out = 0, worst_lse = 0;
  for (std::size_t i = 0; i < warps.out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(warps.out[i])) << "out[" << i << "] was not written, or read NaN";
    ASSERT_EQ(warps.out[i], warps.state[lse_count + i]) << "kept copy of out[" << i << "]";
    ASSERT_EQ(warps.out[i], driver.out[i]) << i;
    ASSERT_EQ(warps.out16[i].bits, float_to_bf16_bits(warps.out[i])) << "out's bf16 rounding at " << i;
    ASSERT_EQ(operand.out16[i].bits, warps.out16[i].bits) << "the operand alone at " << i;
    ASSERT_EQ(operand.state[lse_count + i], warps.state[lse_count + i]) << "its kept copy of out at " << i;
    worst_out = std::max(worst_out, std::fabs(static_cast<double>(warps.out[i]) - tiles.out[i]) / scale);
  }
  for (std::size_t i = 0; i < lse_count; ++i) {
    ASSERT_TRUE(std::isfinite(warps.state[i])) << "lse[" << i << "]";
    ASSERT_EQ(warps.state[i], driver.state[i]) << i;
    ASSERT_EQ(operand.state[i], warps.state[i]) << "the operand alone's lse at " << i;
    worst_lse = std::max(worst_lse, std::fabs(static_cast<double>(warps.state[i]) - tiles.state[i]));
  }
  EXPECT_LE(worst_out, 1e-5);
  EXPECT_LE(worst_lse, 1e-5);
  record_measure("flash-mma forward vs flash forward " + s.text() + " out (of the largest)", worst_out);
  record_measure("flash-mma forward vs flash forward " + s.text() + " lse", worst_lse);
}

TEST(FlashForwardWarp, MatchesTheFlashForwardAtEveryHeadSizeAndPartialTiles) {
  check_against_flash<16>({2, 17, 32, 2});     // T 17: one partial tile, rows of both warps' halves
  check_against_flash<32>({1, 97, 64, 2});     // a full tile and a partial one
  check_against_flash<64>({2, 130, 128, 2});   // GPT-2's head size; three tiles, the last of 2 rows
  check_against_flash<64>({1, 128, 64, 1});    // exact tiles
  check_against_flash<128>({1, 200, 256, 2});  // the largest head size
}

TEST(FlashForwardWarp, ATransposedValueTileMatters) {
  // A kernel that read v untransposed (or k transposed) would still pass a test whose v rows are
  // all alike: here every value column differs, and swapping two of them must move out.
  const Shape s{1, 70, 64, 1};
  std::vector<float> qkv = random_qkv(s, 11);
  const Forward a = run_warps<64>(s, qkv);
  for (int64_t t = 0; t < s.seq_len; ++t) std::swap(qkv[t * 3 * 64 + 128 + 3], qkv[t * 3 * 64 + 128 + 40]);
  const Forward b = run_warps<64>(s, qkv);
  for (int64_t t = 0; t < s.seq_len; ++t) {
    EXPECT_EQ(a.out[t * 64 + 3], b.out[t * 64 + 40]) << t;
    EXPECT_EQ(a.out[t * 64 + 40], b.out[t * 64 + 3]) << t;
  }
}

}  // namespace
}  // namespace tripod::kernels
