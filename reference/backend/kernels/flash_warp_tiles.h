// What flash_forward_warp.h and flash_backward_warp.h share: a block's warps and tiles, the loads
// of a 64-row tile into shared memory (row-major, transposed), a warp's A fragments of 16 rows,
// and the two products every kernel is made of: a warp's 16 rows times a tile's 64 rows
// transposed (scores), and a warp's 16 x 64 fragments (probabilities, score gradients) times a
// tile given transposed (outputs, gradients). For the warp executors of flash_forward_warp.h's
// comment (W::kLanes lanes: 1 on the device, 32 on the host). Shared memory rows are padded by 8
// bf16, so that the 8 groups of a warp's fragment loads (one 32-bit word each) fall in 32
// different banks.
//
// The kernels read q, k, v and dO as bf16 copies their launchers make once a call (qkv [B, T, 3C]
// and dout [B, T, C], token-major as the fp32 tensors): the products take their operands rounded
// to bf16 anyway, and a key tile is read by every query tile after it, so reading the rounded
// copy halves those reads and takes the rounding out of the kernels' loops. The copy rounds as
// the products' own rounding did (float_to_bf16_bits), so the results are those of rounding in the
// tile loads, bit for bit.
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

// A tile row's 8 consecutive bf16 as four 32-bit words (element 2j in word j's low half): one
// 16-byte load on the device (p 16-byte aligned: qkv's and dout's copies start so, and every row
// and head offset is a multiple of 8 elements, head sizes and C being multiples of 16).
TRIPOD_HD void load_eight(const bf16* p, uint32_t (&words)[4]) {
#ifdef __CUDA_ARCH__
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
#else
  for (int j = 0; j < 4; ++j) words[j] = bf16_pair_at(p + 2 * j);
#endif
}

// Element e of the 8 held by load_eight's words.
TRIPOD_HD bf16 element_of(const uint32_t (&words)[4], int e) {
  return bf16{static_cast<uint16_t>(words[e / 2] >> (16 * (e % 2)))};
}

// dst[0..7] = the words' 8 bf16: one 16-byte store on the device (dst 16-byte aligned: a shared
// row is (HD + 8) * 2 bytes, a multiple of 16, and the column a multiple of 8).
TRIPOD_HD void store_eight(bf16* dst, const uint32_t (&words)[4]) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
#else
  for (int e = 0; e < 8; ++e) dst[e] = element_of(words, e);
#endif
}

// Where group g (thread + i x kThreads) of a [64][HD] tile load lies: 8 consecutive elements from
// column `col` of row `row`, HD / 8 groups a row, so that a warp reads whole rows (coalesced).
struct TileGroup {
  int row, col;
};
template <int HD>
TRIPOD_HD TileGroup tile_group(int g) {
  return {g / (HD / 8), g % (HD / 8) * 8};
}

// The transposed stores are 2-byte, one element of its group a thread at a time. If every thread
// stored its group's element e at step e, a row's groups (columns 8 apart, i.e. 8 x kColumnLd bf16
// = 9 x 32 words apart) would all fall in one bank: an 8-way conflict at head size 64. So at step
// e a group stores its element (e + col / 8) mod 8 instead, which spreads them over 8 banks 4
// apart (the rows' halves fill the rest): conflict-free at 32 and 64, 2-way at 16 and 128 (it was
// 8-way at 64 and 16-way at 128; test_flash_forward_warp.cpp counts them).
TRIPOD_HD int transposed_element_at_step(int col, int e) { return (e + col / 8) & 7; }

// words rotated so that element e of the result is element (e + k) mod 8 of the input, with
// selects and shifts only: a register array indexed by a value the compiler cannot see would be
// put in local memory on the device.
TRIPOD_HD void rotate_elements(uint32_t (&w)[4], int k) {
  if (k & 4) {
    const uint32_t w0 = w[0], w1 = w[1];
    w[0] = w[2], w[1] = w[3], w[2] = w0, w[3] = w1;
  }
  if (k & 2) {
    const uint32_t w0 = w[0];
    w[0] = w[1], w[1] = w[2], w[2] = w[3], w[3] = w0;
  }
  if (k & 1) {
    const uint32_t w0 = w[0];
    w[0] = (w[0] >> 16) | (w[1] << 16);
    w[1] = (w[1] >> 16) | (w[2] << 16);
    w[2] = (w[2] >> 16) | (w[3] << 16);
    w[3] = (w[3] >> 16) | (w0 << 16);
  }
}

// src's rows [0, rows) (row stride src_ld, HD columns, bf16) into `row_major` [64][HD] and
// `transposed` [HD][64], each where not null; zeros past `rows`. Thread `thread`'s share of the
// block's kThreads, a group of eight consecutive elements at a time (tile_group).
template <int HD>
TRIPOD_HD void load_tile(int thread, bf16* row_major, bf16* transposed, const bf16* src, int64_t src_ld, int rows) {
  static_assert(HD % 8 == 0, "rows are loaded in groups of eight");
  for (int g = thread; g < kTile * HD / 8; g += kThreads) {
    const TileGroup at = tile_group<HD>(g);
    uint32_t words[4] = {0u, 0u, 0u, 0u};  // +0.0 bf16 pairs
    if (at.row < rows) load_eight(src + at.row * src_ld + at.col, words);
    if (row_major != nullptr) store_eight(row_major + at.row * row_ld(HD) + at.col, words);
    if (transposed != nullptr) {
      rotate_elements(words, at.col / 8);  // element e now the one stored at step e
      TRIPOD_UNROLL
      for (int e = 0; e < 8; ++e)
        transposed[(at.col + transposed_element_at_step(at.col, e)) * kColumnLd + at.row] = element_of(words, e);
    }
  }
}

// A fragments of 16 rows from row0 of src (bf16, row stride src_ld; zeros at rows >= T): each
// register a pair of consecutive elements, one 32-bit load.
template <int HD, class W>
TRIPOD_HD void load_row_fragments(const W& w, uint32_t (&a)[W::kLanes][HD / mma::kK * 4], const bf16* src,
                                  int64_t src_ld, int64_t row0, int64_t seq_len) {
  for (int i = 0; i < W::kLanes; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int kk = 0; kk < HD / mma::kK; ++kk)
      TRIPOD_UNROLL
      for (int r = 0; r < 4; ++r) {
        const mma::Place at = mma::a_place(lane, r, 0);
        a[i][kk * 4 + r] = row0 + at.row < seq_len
                               ? bf16_pair_at(src + (row0 + at.row) * src_ld + kk * mma::kK + at.col)
                               : 0u;
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

// Which columns of a 64-wide tile this lane's C rows see (rows g and g + 8, h = 0, 1): columns
// [first[h], last[h]], kept less the lane's own 2 x thread_in_group so that each element tests
// only its offset, known when the kernel is compiled (fragment_column_offset): two integer
// compares an element instead of the mask's 64-bit index arithmetic. A tile wholly visible costs
// the same compares, and none of the kernels' paths doubles.
struct VisibleColumns {
  int first[2], last[2];
  TRIPOD_HD bool sees(int h, int offset) const { return offset >= first[h] && offset <= last[h]; }
};
TRIPOD_HD int clamp_to_tile(int64_t column) {
  return column < -1 ? -1 : column > kTile ? kTile : static_cast<int>(column);
}
TRIPOD_HD VisibleColumns visible_columns(int lane, const int64_t (&first)[2], const int64_t (&last)[2]) {
  const int mine = 2 * mma::thread_in_group(lane);
  VisibleColumns v{};
  for (int h = 0; h < 2; ++h) {
    v.first[h] = clamp_to_tile(first[h]) - mine;
    v.last[h] = clamp_to_tile(last[h]) - mine;
  }
  return v;
}
// C element x of a 64-wide product (n-tile x / 4, register x % 4) lies in column
// fragment_column_offset(x) + 2 x thread_in_group of the tile, in row half x % 4 / 2 (c_place).
TRIPOD_HD constexpr int fragment_column_offset(int x) { return x / 4 * mma::kN + (x & 1); }

// Two fp32 values rounded to bf16 and packed as one A register (first in the low half): on the
// device one cvt.rn.bf16x2.f32 (round to nearest even, as float_to_bf16_bits, for every value but
// a NaN's payload) where float_pair_to_bf16_word takes a dozen integer instructions; the products'
// A operands are rounded here, a pair for every two scores of every tile.
TRIPOD_HD uint32_t round_pair(float first, float second) {
#ifdef __CUDA_ARCH__
  uint32_t word;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(word) : "f"(second), "f"(first));  // the first source is the high half
  return word;
#else
  return float_pair_to_bf16_word(first, second);
#endif
}

// dst[0..1] = the pair's two bf16 (first in the low half): one 4-byte store on the device (dst
// 4-byte aligned: an even element of a tensor whose allocation is).
TRIPOD_HD void store_pair(bf16* dst, uint32_t word) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint32_t*>(dst) = word;
#else
  dst[0] = bf16{mma::half_of(word, 0)};
  dst[1] = bf16{mma::half_of(word, 1)};
#endif
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
      a[i][0] = round_pair(lo[0], lo[1]);
      a[i][1] = round_pair(lo[2], lo[3]);
      a[i][2] = round_pair(hi[0], hi[1]);
      a[i][3] = round_pair(hi[2], hi[3]);
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
