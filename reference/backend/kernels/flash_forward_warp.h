// Flash attention's forward with its tiles in registers (TRIPOD_CUDA_ATTENTION=flash-mma): the
// same algorithm, state and rounding points as flash_attention_block.h's forward_block, but each
// warp keeps its 16 query rows' scores, probabilities and output accumulators in mma.sync
// fragments (mma_fragments.h) from one product to the next, where forward_block round-trips them
// through shared memory between five barriers a key tile. Only the key tile (row-major) and the
// value tile (transposed, so that a value column is a B fragment's consecutive pair) go through
// shared memory, between two barriers. The backward (flash_backward_warp.h at head sizes up to 64,
// flash_attention_backward.h's block kernels above) reads the same state (the rows' logsumexp,
// then a copy of out).
//
// Written once for both sides over a warp executor W: on the device one thread runs its own lane
// (W::kLanes = 1: every [kLanes][N] array below is that lane's registers, its loops unrolled);
// on the host one call runs all 32 lanes of a warp in lockstep (W::kLanes = 32), the tensor-core
// product emulated from the fragment map and the lanes' shuffles done on the arrays
// (backend/cpu/flash_host_warp.h). So the host replays every index, mask, bound and rounding point
// of the kernel; the products' fp32 sums are taken in k's order on the host (the tensor cores'
// own order on the device), the order forward_block's host product uses, so that on the host the
// two forwards agree but for the order of each row's sum of probabilities.
//
// A block (flash_mma::kThreads threads, 4 warps) takes one 64-row query tile of one (batch, head)
// pair, as forward_block does; per key tile kt <= qt:
//   barrier; the block loads K and V rounded to bf16 (rows past T zeros); barrier;
//   each warp: S = Q K^T (fragments), s = scale * S masked past the diagonal and past T,
//   m' = max(m, the row's max), p = exp(s - m'), l = l * exp(m - m') + sum p (each lane its share),
//   O = O * exp(m - m') + bf16(p) V, m = m'.
// Then out = O / l and lse = m + log(l), l summed over the row's four lanes.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/flash_attention_block.h"
#include "backend/kernels/host_device.h"
#include "backend/kernels/mma_fragments.h"

namespace tripod::kernels::flash_mma {

inline constexpr int kRowsPerWarp = mma::kM;  // 16
inline constexpr int kWarps = flash::kTile / kRowsPerWarp;  // 4: a block takes forward_block's 64-row tile
inline constexpr int kThreads = mma::kWarpLanes * kWarps;
inline constexpr int kKeyTile = 64;
inline constexpr int kKeyTiles8 = kKeyTile / mma::kN;  // the score fragments' n-tiles a key tile

// Shared memory: the key tile row-major, the value tile transposed; rows padded by 8 bf16 so that
// the 8 groups of a warp's fragment loads (one 32-bit word each) fall in 32 different banks.
template <int HD>
struct Shared {
  static constexpr int kKeyLd = HD + 8;          // bf16 k [kKeyTile][HD]
  static constexpr int kValueLd = kKeyTile + 8;  // bf16 vt [HD][kKeyTile]
  alignas(16) bf16 k[kKeyTile * kKeyLd];
  alignas(16) bf16 vt[HD * kValueLd];
};

// One warp's registers across the key tiles, [lane][...] (L lanes: 1 on the device, 32 on the host).
template <int HD, int L>
struct WarpState {
  uint32_t q[L][HD / mma::kK * 4];  // Q's A fragments (bf16 pairs), one set of 4 per 16 columns
  float o[L][HD / mma::kN * 4];     // O's accumulators, 4 per 8 columns
  float row_max[L][2];              // the running max of rows g and g + 8 (the same in the row's 4 lanes)
  float row_sum[L][2];              // this lane's share of those rows' sums of probabilities
};

TRIPOD_HD uint32_t bf16_pair_at(const bf16* p) {  // p[0] low, p[1] high: one 32-bit load on the device
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  return static_cast<uint32_t>(p[0].bits) | (static_cast<uint32_t>(p[1].bits) << 16);
#endif
}

// The warp's 16 query rows from row0 (rows past T zeros) as A fragments rounded to bf16, and its
// running state emptied.
template <int HD, class W>
TRIPOD_HD void start_rows(const W& w, WarpState<HD, W::kLanes>& s, const flash::Problem& p, const float* qkv,
                          int64_t bh, int64_t row0) {
  for (int i = 0; i < W::kLanes; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int kk = 0; kk < HD / mma::kK; ++kk)
      TRIPOD_UNROLL
      for (int r = 0; r < 4; ++r) {
        const mma::Place at = mma::a_place(lane, r, 0);
        const int64_t row = row0 + at.row;
        float x0 = 0.0f, x1 = 0.0f;
        if (row < p.seq_len) {
          const float* src = qkv + p.qkv_index(bh, row, 0) + kk * mma::kK + at.col;
          x0 = src[0], x1 = src[1];
        }
        s.q[i][kk * 4 + r] = float_pair_to_bf16_word(x0, x1);
      }
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; ++x) s.o[i][x] = 0.0f;
    s.row_max[i][0] = s.row_max[i][1] = -INFINITY;
    s.row_sum[i][0] = s.row_sum[i][1] = 0.0f;
  }
}

// Thread `thread`'s share of loading the key tile at key0 (`rows` of them; zeros past): k as it is,
// v transposed, both rounded to bf16. Four consecutive floats a thread at a time.
template <int HD>
TRIPOD_HD void load_key_tile(int thread, Shared<HD>& sh, const flash::Problem& p, const float* qkv, int64_t bh,
                             int64_t key0, int rows) {
  static_assert(HD % 4 == 0, "rows are loaded in groups of four");
  for (int g = thread; g < kKeyTile * HD / 4; g += kThreads) {
    const int r = g / (HD / 4), d = g % (HD / 4) * 4;
    float k4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, v4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (r < rows) {
      flash::load_four(qkv + p.qkv_index(bh, key0 + r, 1) + d, k4);
      flash::load_four(qkv + p.qkv_index(bh, key0 + r, 2) + d, v4);
    }
    flash::store_four(sh.k + r * Shared<HD>::kKeyLd + d, k4);
    for (int e = 0; e < 4; ++e) sh.vt[(d + e) * Shared<HD>::kValueLd + r] = flash::to_bf16(v4[e]);
  }
}

// The warp's rows from row0 against the key tile at key0 in `sh` (the online softmax step above).
template <int HD, class W>
TRIPOD_HD void forward_tile(const W& w, WarpState<HD, W::kLanes>& s, const Shared<HD>& sh, const flash::Problem& p,
                            int64_t row0, int64_t key0) {
  constexpr int L = W::kLanes;
  float sc[L][kKeyTiles8 * 4];  // S, then the probabilities: n-tile j's 4 values at 4j
  uint32_t b[L][2];
  for (int i = 0; i < L; ++i)
    TRIPOD_UNROLL
    for (int x = 0; x < kKeyTiles8 * 4; ++x) sc[i][x] = 0.0f;
  TRIPOD_UNROLL
  for (int j = 0; j < kKeyTiles8; ++j)
    TRIPOD_UNROLL
    for (int kk = 0; kk < HD / mma::kK; ++kk) {
      for (int i = 0; i < L; ++i) {  // B [k = d][n = key] = K [key][d]: a key row's consecutive pair
        const int lane = w.lane(i);
        const bf16* key = sh.k + (j * mma::kN + mma::group_of(lane)) * Shared<HD>::kKeyLd + kk * mma::kK +
                          2 * mma::thread_in_group(lane);
        b[i][0] = bf16_pair_at(key);
        b[i][1] = bf16_pair_at(key + 8);
      }
      w.mma(sc, 4 * j, s.q, 4 * kk, b);
    }
  // Scaled and masked scores; each row's max over this lane's columns, then over its four lanes.
  float tile_max[L][2];
  for (int i = 0; i < L; ++i) {
    const int lane = w.lane(i);
    tile_max[i][0] = tile_max[i][1] = -INFINITY;
    TRIPOD_UNROLL
    for (int x = 0; x < kKeyTiles8 * 4; ++x) {
      const mma::Place at = mma::c_place(lane, x % 4);
      const int64_t row = row0 + at.row, key = key0 + x / 4 * mma::kN + at.col;
      const float v = key <= row && key < p.seq_len ? p.scale * sc[i][x] : -INFINITY;
      sc[i][x] = v;
      tile_max[i][x % 4 / 2] = v > tile_max[i][x % 4 / 2] ? v : tile_max[i][x % 4 / 2];
    }
  }
  w.quad_max(tile_max, 0);
  w.quad_max(tile_max, 1);
  // Probabilities under the new max (masked ones exact zeros), the sums and O rescaled first.
  for (int i = 0; i < L; ++i) {
    float new_max[2], rescale[2];
    TRIPOD_UNROLL
    for (int h = 0; h < 2; ++h) {
      new_max[h] = tile_max[i][h] > s.row_max[i][h] ? tile_max[i][h] : s.row_max[i][h];
      rescale[h] = std::exp(s.row_max[i][h] - new_max[h]);  // 0 on the first tile (m = -inf)
      s.row_sum[i][h] *= rescale[h];
      s.row_max[i][h] = new_max[h];
    }
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; ++x) s.o[i][x] *= rescale[x % 4 / 2];
    TRIPOD_UNROLL
    for (int x = 0; x < kKeyTiles8 * 4; ++x) {
      const int h = x % 4 / 2;
      const float e = sc[i][x] == -INFINITY ? 0.0f : std::exp(sc[i][x] - new_max[h]);
      sc[i][x] = e;
      s.row_sum[i][h] += e;
    }
  }
  // O += bf16(P) V, 16 keys at a time: score n-tiles 2kk and 2kk + 1 are the A fragment as they lie.
  uint32_t a[L][4];
  TRIPOD_UNROLL
  for (int kk = 0; kk < kKeyTile / mma::kK; ++kk) {
    for (int i = 0; i < L; ++i) {
      const float* lo = sc[i] + 4 * (2 * kk);  // keys 16kk + 2t, +1 (rows g; g + 8)
      const float* hi = sc[i] + 4 * (2 * kk + 1);  // keys 16kk + 8 + 2t, +1
      a[i][0] = float_pair_to_bf16_word(lo[0], lo[1]);
      a[i][1] = float_pair_to_bf16_word(lo[2], lo[3]);
      a[i][2] = float_pair_to_bf16_word(hi[0], hi[1]);
      a[i][3] = float_pair_to_bf16_word(hi[2], hi[3]);
    }
    TRIPOD_UNROLL
    for (int jd = 0; jd < HD / mma::kN; ++jd) {
      for (int i = 0; i < L; ++i) {  // B [k = key][n = d] = vt [d][key]: a value column's consecutive pair
        const int lane = w.lane(i);
        const bf16* value = sh.vt + (jd * mma::kN + mma::group_of(lane)) * Shared<HD>::kValueLd + kk * mma::kK +
                            2 * mma::thread_in_group(lane);
        b[i][0] = bf16_pair_at(value);
        b[i][1] = bf16_pair_at(value + 8);
      }
      w.mma(s.o, 4 * jd, a, 0, b);
    }
  }
}

// out's rows (and out_copy's, where not null) = O / l, and the rows' logsumexp, for the rows < T.
template <int HD, class W>
TRIPOD_HD void finish_rows(const W& w, WarpState<HD, W::kLanes>& s, const flash::Problem& p, float* out,
                           float* out_copy, float* lse, int64_t bh, int64_t row0) {
  w.quad_sum(s.row_sum, 0);
  w.quad_sum(s.row_sum, 1);
  for (int i = 0; i < W::kLanes; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; ++x) {
      const mma::Place at = mma::c_place(lane, x % 4);
      const int64_t row = row0 + at.row;
      if (row >= p.seq_len) continue;
      const int64_t index = p.token_index(bh, row) + x / 4 * mma::kN + at.col;
      const float value = s.o[i][x] / s.row_sum[i][x % 4 / 2];
      out[index] = value;
      if (out_copy != nullptr) out_copy[index] = value;
    }
    if (mma::thread_in_group(lane) == 0)
      TRIPOD_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + mma::group_of(lane) + 8 * h;
        if (row < p.seq_len) lse[bh * p.seq_len + row] = s.row_max[i][h] + std::log(s.row_sum[i][h]);
      }
  }
}

}  // namespace tripod::kernels::flash_mma
