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
//   barrier; the block loads K and V (from qkv's bf16 copy; rows past T zeros); barrier;
//   each warp: S = Q K^T (fragments), s = scale * S masked past the diagonal and past T,
//   m' = max(m, the row's max), p = exp(s - m'), l = l * exp(m - m') + sum p (each lane its share),
//   O = O * exp(m - m') + bf16(p) V, m = m'.
// Then out = O / l and lse = m + log(l), l summed over the row's four lanes.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/flash_attention_block.h"
#include "backend/kernels/flash_warp_tiles.h"
#include "backend/kernels/host_device.h"
#include "backend/kernels/mma_fragments.h"

namespace tripod::kernels::flash_mma {

// Shared memory: the key tile row-major, the value tile transposed.
template <int HD>
struct Shared {
  alignas(16) bf16 k[kTile * row_ld(HD)];
  alignas(16) bf16 vt[HD * kColumnLd];
};

// One warp's registers across the key tiles, [lane][...] (L lanes: 1 on the device, 32 on the host).
template <int HD, int L>
struct WarpState {
  uint32_t q[L][HD / mma::kK * 4];  // Q's A fragments (bf16 pairs), one set of 4 per 16 columns
  float o[L][HD / mma::kN * 4];     // O's accumulators, 4 per 8 columns
  float row_max[L][2];              // the running max of rows g and g + 8 (the same in the row's 4 lanes)
  float row_sum[L][2];              // this lane's share of those rows' sums of probabilities
};

// The warp's 16 query rows from row0 (rows past T zeros) as A fragments, and its running state
// emptied. qkv: the bf16 copy of qkv [B, T, 3C] (flash_warp_tiles.h), here and below.
template <int HD, class W>
TRIPOD_HD void start_rows(const W& w, WarpState<HD, W::kLanes>& s, const flash::Problem& p, const bf16* qkv,
                          int64_t bh, int64_t row0) {
  load_row_fragments<HD>(w, s.q, qkv + p.qkv_index(bh, 0, 0), 3 * p.channels, row0, p.seq_len);
  for (int i = 0; i < W::kLanes; ++i) {
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; ++x) s.o[i][x] = 0.0f;
    s.row_max[i][0] = s.row_max[i][1] = -INFINITY;
    s.row_sum[i][0] = s.row_sum[i][1] = 0.0f;
  }
}

// Thread `thread`'s share of loading the key tile at key0 (`rows` of them; zeros past): k as it is,
// v transposed.
template <int HD>
TRIPOD_HD void load_key_tile(int thread, Shared<HD>& sh, const flash::Problem& p, const bf16* qkv, int64_t bh,
                             int64_t key0, int rows) {
  load_tile<HD>(thread, sh.k, nullptr, qkv + p.qkv_index(bh, key0, 1), 3 * p.channels, rows);
  load_tile<HD>(thread, nullptr, sh.vt, qkv + p.qkv_index(bh, key0, 2), 3 * p.channels, rows);
}

// The warp's rows from row0 against the key tile at key0 in `sh` (the online softmax step above).
// kMasked: the tile is the query tile's diagonal one, the only one holding keys past a row of its
// or past T (every key tile before it lies below the diagonal and wholly before T); the others
// skip the mask's arithmetic. The callers peel the diagonal tile off their loops (two forms in
// one loop body take more registers).
template <int HD, bool kMasked, class W>
TRIPOD_HD void forward_tile(const W& w, WarpState<HD, W::kLanes>& s, const Shared<HD>& sh, const flash::Problem& p,
                            int64_t row0, int64_t key0) {
  constexpr int L = W::kLanes;
  float sc[L][kTiles8 * 4];  // S, then the probabilities: n-tile j's 4 values at 4j
  product_with_rows<HD>(w, sc, s.q, sh.k);
  // Scaled and masked scores (a row sees the keys up to itself and before T); each row's max over
  // this lane's columns, then over its four lanes.
  float tile_max[L][2];
  for (int i = 0; i < L; ++i) {
    const int lane = w.lane(i);
    tile_max[i][0] = tile_max[i][1] = -INFINITY;
    TRIPOD_UNROLL
    for (int x = 0; x < kTiles8 * 4; ++x) {
      const int h = x % 4 / 2;
      const mma::Place at = mma::c_place(lane, x % 4);
      const int64_t row = row0 + at.row, key = key0 + x / 4 * mma::kN + at.col;
      const float v = !kMasked || (key <= row && key < p.seq_len) ? p.scale * sc[i][x] : -INFINITY;
      sc[i][x] = v;
      tile_max[i][h] = v > tile_max[i][h] ? v : tile_max[i][h];
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
    for (int x = 0; x < kTiles8 * 4; ++x) {
      const int h = x % 4 / 2;
      const float e = sc[i][x] == -INFINITY ? 0.0f : std::exp(sc[i][x] - new_max[h]);
      sc[i][x] = e;
      s.row_sum[i][h] += e;
    }
  }
  // O += bf16(P) V, 16 keys at a time: score n-tiles 2kk and 2kk + 1 are the A fragment as they lie.
  accumulate_times_columns<HD>(w, s.o, sc, sh.vt);
}

// out's rows = O / l, and the rows' logsumexp, for the rows < T. Each of out (fp32), out16 (its
// bf16 rounding, as convert rounds: the attention's GEMM operand, written without the fp32 out) and
// out_copy (the state's fp32 copy) is written where not null; out and out16 [B, T, C] token-major.
template <int HD, class W>
TRIPOD_HD void finish_rows(const W& w, WarpState<HD, W::kLanes>& s, const flash::Problem& p, float* out, bf16* out16,
                           float* out_copy, float* lse, int64_t bh, int64_t row0) {
  w.quad_sum(s.row_sum, 0);
  w.quad_sum(s.row_sum, 1);
  for (int i = 0; i < W::kLanes; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; x += 2) {  // x and x + 1: one row's two adjacent columns
      const mma::Place at = mma::c_place(lane, x % 4);
      const int64_t row = row0 + at.row;
      if (row >= p.seq_len) continue;
      const int64_t index = p.token_index(bh, row) + x / 4 * mma::kN + at.col;  // even: a 4-byte bf16 pair
      const float first = s.o[i][x] / s.row_sum[i][x % 4 / 2], second = s.o[i][x + 1] / s.row_sum[i][x % 4 / 2];
      if (out != nullptr) out[index] = first, out[index + 1] = second;
      if (out16 != nullptr) store_pair(out16 + index, round_pair(first, second));
      if (out_copy != nullptr) out_copy[index] = first, out_copy[index + 1] = second;
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
