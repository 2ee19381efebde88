// What flash_forward_warp.h and flash_backward_warp.h share: a block's warps and tiles, the loads
// of a 64-row tile into shared memory (row-major, transposed, rounded to bf16), a warp's A
// fragments of 16 rows, and the two products every kernel is made of: a warp's 16 rows times a
// tile's 64 rows transposed (scores), and a warp's 16 x 64 fragments (probabilities, score
// gradients) times a tile given transposed (outputs, gradients). For the warp executors of
// flash_forward_warp.h's comment (W::kLanes lanes: 1 on the device, 32 on the host). Shared
// memory rows are padded by 8 bf16, so that the 8 groups of a warp's fragment loads (one 32-bit
// word each) fall in 32 different banks.
#pragma once
#include <cstdint>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/flash_attention_block.h"
#include "backend/kernels/host_device.h"
#include "backend/kernels/mma_fragments.h"

namespace tripod::kernels::flash_mma {

inline constexpr int kRowsPerWarp = mma::kM;                // 16
inline constexpr int kWarps = flash::kTile / kRowsPerWarp;  // 4: a block takes the block kernels' 64-row tile
inline constexpr int kThreads = mma::kWarpLanes * kWarps;
inline constexpr int kTile = flash::kTile;          // 64 rows a tile, queries or keys
inline constexpr int kTiles8 = kTile / mma::kN;     // a 64-wide product's n-tiles
TRIPOD_HD constexpr int row_ld(int hd) { return hd + 8; }     // bf16 [64][hd] row-major
inline constexpr int kColumnLd = kTile + 8;         // bf16 [hd][64] transposed

TRIPOD_HD uint32_t bf16_pair_at(const bf16* p) {  // p[0] low, p[1] high: one 32-bit load on the device
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  return static_cast<uint32_t>(p[0].bits) | (static_cast<uint32_t>(p[1].bits) << 16);
#endif
}

// src's rows [0, rows) (row stride src_ld, HD columns) rounded to bf16 into `row_major` [64][HD]
// and `transposed` [HD][64], each where not null; zeros past `rows`. Thread `thread`'s share of
// the block's kThreads, four consecutive floats at a time (one 16-byte load on the device).
template <int HD>
TRIPOD_HD void load_tile(int thread, bf16* row_major, bf16* transposed, const float* src, int64_t src_ld, int rows) {
  for (int g = thread; g < kTile * HD / 4; g += kThreads) {
    const int r = g / (HD / 4), d = g % (HD / 4) * 4;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (r < rows) flash::load_four(src + r * src_ld + d, x);
    if (row_major != nullptr) flash::store_four(row_major + r * row_ld(HD) + d, x);
    if (transposed != nullptr)
      for (int e = 0; e < 4; ++e) transposed[(d + e) * kColumnLd + r] = flash::to_bf16(x[e]);
  }
}

// A fragments of 16 rows from row0 of src (row stride src_ld; zeros at rows >= T), rounded to bf16.
template <int HD, class W>
TRIPOD_HD void load_row_fragments(const W& w, uint32_t (&a)[W::kLanes][HD / mma::kK * 4], const float* src,
                                  int64_t src_ld, int64_t row0, int64_t seq_len) {
  for (int i = 0; i < W::kLanes; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int kk = 0; kk < HD / mma::kK; ++kk)
      TRIPOD_UNROLL
      for (int r = 0; r < 4; ++r) {
        const mma::Place at = mma::a_place(lane, r, 0);
        float x0 = 0.0f, x1 = 0.0f;
        if (row0 + at.row < seq_len) {
          const float* p = src + (row0 + at.row) * src_ld + kk * mma::kK + at.col;
          x0 = p[0], x1 = p[1];
        }
        a[i][kk * 4 + r] = float_pair_to_bf16_word(x0, x1);
      }
  }
}

// c [16 x 64] = a [16 x HD] (A fragments) b^T, b [64][HD] row-major bf16 in shared memory.
template <int HD, class W>
TRIPOD_HD void product_with_rows(const W& w, float (&c)[W::kLanes][kTiles8 * 4],
                                 const uint32_t (&a)[W::kLanes][HD / mma::kK * 4], const bf16* b) {
  uint32_t frag[W::kLanes][2];
  for (int i = 0; i < W::kLanes; ++i)
    TRIPOD_UNROLL
    for (int x = 0; x < kTiles8 * 4; ++x) c[i][x] = 0.0f;
  TRIPOD_UNROLL
  for (int j = 0; j < kTiles8; ++j)
    TRIPOD_UNROLL
    for (int kk = 0; kk < HD / mma::kK; ++kk) {
      for (int i = 0; i < W::kLanes; ++i) {
        const int lane = w.lane(i);
        const bf16* row =
            b + (j * mma::kN + mma::group_of(lane)) * row_ld(HD) + kk * mma::kK + 2 * mma::thread_in_group(lane);
        frag[i][0] = bf16_pair_at(row);
        frag[i][1] = bf16_pair_at(row + 8);
      }
      w.mma(c, 4 * j, a, 4 * kk, frag);
    }
}

// acc [16 x HD] += a [16 x 64] (c's fragments rounded to bf16: values[i][4j ..] of n-tile j)
// b [64 x HD], b given transposed: bt [HD][64] bf16 in shared memory.
template <int HD, class W>
TRIPOD_HD void accumulate_times_columns(const W& w, float (&acc)[W::kLanes][HD / mma::kN * 4],
                                        const float (&values)[W::kLanes][kTiles8 * 4], const bf16* bt) {
  uint32_t a[W::kLanes][4], frag[W::kLanes][2];
  TRIPOD_UNROLL
  for (int kk = 0; kk < kTile / mma::kK; ++kk) {
    for (int i = 0; i < W::kLanes; ++i) {
      const float* lo = values[i] + 4 * (2 * kk);
      const float* hi = values[i] + 4 * (2 * kk + 1);
      a[i][0] = float_pair_to_bf16_word(lo[0], lo[1]);
      a[i][1] = float_pair_to_bf16_word(lo[2], lo[3]);
      a[i][2] = float_pair_to_bf16_word(hi[0], hi[1]);
      a[i][3] = float_pair_to_bf16_word(hi[2], hi[3]);
    }
    TRIPOD_UNROLL
    for (int jd = 0; jd < HD / mma::kN; ++jd) {
      for (int i = 0; i < W::kLanes; ++i) {
        const int lane = w.lane(i);
        const bf16* column = bt + (jd * mma::kN + mma::group_of(lane)) * kColumnLd + kk * mma::kK +
                             2 * mma::thread_in_group(lane);
        frag[i][0] = bf16_pair_at(column);
        frag[i][1] = bf16_pair_at(column + 8);
      }
      w.mma(acc, 4 * jd, a, 0, frag);
    }
  }
}

}  // namespace tripod::kernels::flash_mma
