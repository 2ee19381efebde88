// Flash attention's backward with its tiles in registers (TRIPOD_CUDA_ATTENTION=flash-mma, head
// sizes up to 64): flash_attention_backward.h's two kernels — dK and dV per key tile over the query
// tiles that see it, dQ per query tile over its key tiles, no atomics — with each warp's scores,
// probability and score gradients kept in mma.sync fragments (mma_fragments.h) as
// flash_forward_warp.h does for the forward, and the same warp executors. The probabilities come
// from the forward's logsumexp, delta = rowsum(bf16(dO) * out) from flash::delta_of_row.
//
// The same products in the same order as flash_attention_backward.h, rounded at the same points:
//   P = exp(scale * S - lse) where the query is before T and the key not past it (else 0);
//   dS = bf16(P * (dP - delta) * scale), dP = bf16(dO) bf16(V)^T;
//   dV += bf16(P)^T bf16(dO), dK += dS^T bf16(Q) over query tiles; dQ += dS bf16(K) over key tiles,
// every gradient summed over its 64-row tiles in order, each tile's 64 rows in order (four
// 16-deep products). So on the host, whose products sum in k's order as the block algorithms'
// host product does, the gradients are the block algorithms' bit for bit.
//
// Key-tile blocks: warp w takes keys [key0 + 16w, +16) and works transposed: S^T = K Q^T and
// dP^T = V dO^T, so that P^T and dS^T lie in C fragments that are the A operands of dV += P^T dO
// and dK += dS^T Q; those products' B operands are dO and Q transposed, so the block keeps the
// query tile's Q and dO both ways in shared memory (row-major for S^T and dP^T). Query-tile
// blocks: warp w takes queries [row0 + 16w, +16), S = Q K^T, dP = dO V^T, dQ += dS K with K
// transposed in shared memory beside K and V. qkv and dout below are their bf16 copies
// (flash_warp_tiles.h); delta comes from the fp32 dout.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/flash_attention_backward.h"
#include "backend/kernels/flash_warp_tiles.h"
#include "backend/kernels/host_device.h"
#include "backend/kernels/mma_fragments.h"

namespace tripod::kernels::flash_mma {

// The head sizes whose register backward is built: at 128 a warp's operands and gradients would
// need ~260 registers a thread; the block algorithms' backward takes those (the same state).
TRIPOD_HD bool register_backward_head_dim(int64_t head_dim) { return head_dim <= 64; }

template <int HD>
struct KeyGradsShared {  // the query tile: Q and dO both ways, and the rows' lse and delta
  alignas(16) bf16 q[kTile * row_ld(HD)];
  alignas(16) bf16 dout[kTile * row_ld(HD)];
  alignas(16) bf16 q_t[HD * kColumnLd];
  alignas(16) bf16 dout_t[HD * kColumnLd];
  float lse[kTile], delta[kTile];
};

template <int HD>
struct QueryGradsShared {  // the key tile: K both ways, V row-major
  alignas(16) bf16 k[kTile * row_ld(HD)];
  alignas(16) bf16 v[kTile * row_ld(HD)];
  alignas(16) bf16 k_t[HD * kColumnLd];
};

// acc's rows [row0, row0 + 16) below T into part `part` of dqkv (0 dq, 1 dk, 2 dv).
template <int HD, class W>
TRIPOD_HD void store_rows(const W& w, const float (&acc)[W::kLanes][HD / mma::kN * 4], const flash::Problem& p,
                          float* dqkv, int64_t bh, int64_t row0, int part) {
  for (int i = 0; i < W::kLanes; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; ++x) {
      const mma::Place at = mma::c_place(lane, x % 4);
      if (row0 + at.row < p.seq_len) dqkv[p.qkv_index(bh, row0 + at.row, part) + x / 4 * mma::kN + at.col] = acc[i][x];
    }
  }
}

// ---- the gradients as c_attn's bf16 operand, with the bias gradient's partial sums ----
// Where the model takes dqkv only as c_attn's bf16 operand with its bias gradient (Backend::
// attention_backward_operand), the kernels write each gradient's bf16 rounding (as convert rounds:
// the bits of the fp32 dqkv's copy) and, for the bias gradient, each warp's 16 rows summed per
// column: partials [B x tiles x kWarps, 3C], row (b x tiles + tile) x kWarps + warp, every element
// written once (dq's thirds by the query kernel, dk's and dv's by the key kernel; rows past T
// count as zeros), which Backend::bias_grad then sums: fp32 column sums in another order than
// over dqkv's rows, so the bias gradient's bits are not the unfused form's.

// Rows of the partial sums.
TRIPOD_HD int64_t column_sum_rows(const flash::Problem& p) { return p.batch * p.tiles() * kWarps; }

// Where the backward writes dqkv as that operand: both pointers, dqkv (fp32) then null; else neither.
struct OperandOut {
  bf16* dqkv16 = nullptr;   // [B, T, 3C], 4-byte aligned
  float* partials = nullptr;  // [column_sum_rows, 3C]
  TRIPOD_HD bool given() const { return dqkv16 != nullptr; }
};

// acc's rows [row0, row0 + 16) below T into part `part` of dqkv16 as bf16 (a pair of adjacent
// columns a 4-byte store), and their column sums into the warp's row of `partials`.
template <int HD, class W>
TRIPOD_HD void store_operand_rows(const W& w, const float (&acc)[W::kLanes][HD / mma::kN * 4],
                                  const flash::Problem& p, bf16* dqkv16, float* partials, int64_t bh, int64_t row0,
                                  int part) {
  constexpr int L = W::kLanes, kSums = HD / mma::kN * 2;  // a lane's columns: 2 an n-tile
  float sums[L][kSums];
  for (int i = 0; i < L; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; x += 2) {  // x and x + 1: one row's two adjacent columns
      const mma::Place at = mma::c_place(lane, x % 4);
      if (row0 + at.row < p.seq_len)
        store_pair(dqkv16 + p.qkv_index(bh, row0 + at.row, part) + x / 4 * mma::kN + at.col,
                   round_pair(acc[i][x], acc[i][x + 1]));
    }
    const bool low = row0 + mma::group_of(lane) < p.seq_len, high = row0 + mma::group_of(lane) + 8 < p.seq_len;
    TRIPOD_UNROLL
    for (int j = 0; j < HD / mma::kN; ++j)
      TRIPOD_UNROLL
      for (int e = 0; e < 2; ++e)  // rows g and g + 8 of column 8j + 2 thread_in_group + e
        sums[i][2 * j + e] = (low ? acc[i][4 * j + e] : 0.0f) + (high ? acc[i][4 * j + 2 + e] : 0.0f);
  }
  TRIPOD_UNROLL
  for (int k = 0; k < kSums; ++k) w.column_sum(sums, k);  // over the 8 row groups
  const int64_t batch = bh / p.n_head, head = bh % p.n_head, group = row0 / kRowsPerWarp;  // tile x kWarps + warp
  float* row = partials + (batch * p.tiles() * kWarps + group) * 3 * p.channels + part * p.channels + head * HD;
  for (int i = 0; i < L; ++i) {
    const int lane = w.lane(i);
    if (mma::group_of(lane) != 0) continue;  // every group holds the sums: group 0's lanes write them
    TRIPOD_UNROLL
    for (int j = 0; j < HD / mma::kN; ++j)
      TRIPOD_UNROLL
      for (int e = 0; e < 2; ++e) row[j * mma::kN + 2 * mma::thread_in_group(lane) + e] = sums[i][2 * j + e];
  }
}

// dqkv's rows as store_rows writes them (fp32), or as store_operand_rows does where the operand is given.
template <int HD, class W>
TRIPOD_HD void store_gradient_rows(const W& w, const float (&acc)[W::kLanes][HD / mma::kN * 4],
                                   const flash::Problem& p, float* dqkv, const OperandOut& operand, int64_t bh,
                                   int64_t row0, int part) {
  if (operand.given()) store_operand_rows<HD>(w, acc, p, operand.dqkv16, operand.partials, bh, row0, part);
  else store_rows<HD>(w, acc, p, dqkv, bh, row0, part);
}

// ---- dK and dV: a warp's 16 keys ----

template <int HD, int L>
struct KeyWarp {
  uint32_t k[L][HD / mma::kK * 4], v[L][HD / mma::kK * 4];  // A fragments of its keys' K and V rows
  float dk[L][HD / mma::kN * 4], dv[L][HD / mma::kN * 4];
};

template <int HD, class W>
TRIPOD_HD void key_warp_start(const W& w, KeyWarp<HD, W::kLanes>& s, const flash::Problem& p, const bf16* qkv,
                              int64_t bh, int64_t key0) {
  load_row_fragments<HD>(w, s.k, qkv + p.qkv_index(bh, 0, 1), 3 * p.channels, key0, p.seq_len);
  load_row_fragments<HD>(w, s.v, qkv + p.qkv_index(bh, 0, 2), 3 * p.channels, key0, p.seq_len);
  for (int i = 0; i < W::kLanes; ++i)
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; ++x) s.dk[i][x] = s.dv[i][x] = 0.0f;
}

// The block's share of loading query tile qt: Q and dO both ways, the rows' lse and delta.
template <int HD>
TRIPOD_HD void load_query_tile(int thread, KeyGradsShared<HD>& sh, const flash::Problem& p, const bf16* qkv,
                               const bf16* dout, const float* lse, const float* delta, int64_t bh, int64_t qt) {
  const int64_t row0 = qt * kTile;
  const int rows = p.rows_in_tile(qt);
  load_tile<HD>(thread, sh.q, sh.q_t, qkv + p.qkv_index(bh, row0, 0), 3 * p.channels, rows);
  load_tile<HD>(thread, sh.dout, sh.dout_t, dout + p.token_index(bh, row0), p.channels, rows);
  if (thread < kTile) {
    sh.lse[thread] = thread < rows ? lse[bh * p.seq_len + row0 + thread] : 0.0f;
    sh.delta[thread] = thread < rows ? delta[bh * p.seq_len + row0 + thread] : 0.0f;
  }
}

// The warp's keys from key0 against the query tile at query0 in `sh`.
template <int HD, class W>
TRIPOD_HD void key_warp_tile(const W& w, KeyWarp<HD, W::kLanes>& s, const KeyGradsShared<HD>& sh,
                             const flash::Problem& p, int64_t key0, int64_t query0) {
  constexpr int L = W::kLanes;
  float st[L][kTiles8 * 4], dpt[L][kTiles8 * 4];  // S^T and dP^T [16 keys x 64 queries]
  product_with_rows<HD>(w, st, s.k, sh.q);
  product_with_rows<HD>(w, dpt, s.v, sh.dout);
  for (int i = 0; i < L; ++i) {  // P^T into st, dS^T into dpt (fp32 here: the products round them to bf16)
    const int lane = w.lane(i);
    // Key k sees the queries from itself to T - 1.
    const int64_t key = key0 + mma::group_of(lane), last = p.seq_len - 1 - query0;
    const VisibleColumns seen = visible_columns(lane, {key - query0, key + 8 - query0}, {last, last});
    TRIPOD_UNROLL
    for (int x = 0; x < kTiles8 * 4; ++x) {
      const int c = fragment_column_offset(x) + 2 * mma::thread_in_group(lane);  // the query within the tile
      const bool visible = seen.sees(x % 4 / 2, fragment_column_offset(x));
      const float pr = visible ? std::exp(p.scale * st[i][x] - sh.lse[c]) : 0.0f;
      st[i][x] = pr;
      dpt[i][x] = visible ? pr * (dpt[i][x] - sh.delta[c]) * p.scale : 0.0f;
    }
  }
  accumulate_times_columns<HD>(w, s.dv, st, sh.dout_t);
  accumulate_times_columns<HD>(w, s.dk, dpt, sh.q_t);
}

// ---- dQ: a warp's 16 queries ----

template <int HD, int L>
struct QueryWarp {
  uint32_t q[L][HD / mma::kK * 4], dout[L][HD / mma::kK * 4];  // A fragments of its rows of Q and dO
  float lse[L][2], delta[L][2];                                // rows g and g + 8
  float dq[L][HD / mma::kN * 4];
};

template <int HD, class W>
TRIPOD_HD void query_warp_start(const W& w, QueryWarp<HD, W::kLanes>& s, const flash::Problem& p, const bf16* qkv,
                                const bf16* dout, const float* lse, const float* delta, int64_t bh, int64_t row0) {
  load_row_fragments<HD>(w, s.q, qkv + p.qkv_index(bh, 0, 0), 3 * p.channels, row0, p.seq_len);
  load_row_fragments<HD>(w, s.dout, dout + p.token_index(bh, 0), p.channels, row0, p.seq_len);
  for (int i = 0; i < W::kLanes; ++i) {
    const int lane = w.lane(i);
    TRIPOD_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + mma::group_of(lane) + 8 * h;
      s.lse[i][h] = row < p.seq_len ? lse[bh * p.seq_len + row] : 0.0f;
      s.delta[i][h] = row < p.seq_len ? delta[bh * p.seq_len + row] : 0.0f;
    }
    TRIPOD_UNROLL
    for (int x = 0; x < HD / mma::kN * 4; ++x) s.dq[i][x] = 0.0f;
  }
}

// The block's share of loading key tile kt: K both ways, V row-major.
template <int HD>
TRIPOD_HD void load_key_tile(int thread, QueryGradsShared<HD>& sh, const flash::Problem& p, const bf16* qkv,
                             int64_t bh, int64_t kt) {
  const int64_t key0 = kt * kTile;
  const int rows = p.rows_in_tile(kt);
  load_tile<HD>(thread, sh.k, sh.k_t, qkv + p.qkv_index(bh, key0, 1), 3 * p.channels, rows);
  load_tile<HD>(thread, sh.v, nullptr, qkv + p.qkv_index(bh, key0, 2), 3 * p.channels, rows);
}

// The warp's queries from row0 against the key tile at key0 in `sh`.
template <int HD, class W>
TRIPOD_HD void query_warp_tile(const W& w, QueryWarp<HD, W::kLanes>& s, const QueryGradsShared<HD>& sh,
                               const flash::Problem& p, int64_t row0, int64_t key0) {
  constexpr int L = W::kLanes;
  float sc[L][kTiles8 * 4], dp[L][kTiles8 * 4];  // S and dP [16 queries x 64 keys]
  product_with_rows<HD>(w, sc, s.q, sh.k);
  product_with_rows<HD>(w, dp, s.dout, sh.v);
  for (int i = 0; i < L; ++i) {  // dS into dp (fp32 here: the product rounds it to bf16)
    const int lane = w.lane(i);
    // A query before T sees the keys up to itself; one past T none.
    const int64_t row = row0 + mma::group_of(lane);
    const VisibleColumns seen = visible_columns(
        lane, {0, 0}, {row < p.seq_len ? row - key0 : -1, row + 8 < p.seq_len ? row + 8 - key0 : -1});
    TRIPOD_UNROLL
    for (int x = 0; x < kTiles8 * 4; ++x) {
      const int h = x % 4 / 2;
      const bool visible = seen.sees(h, fragment_column_offset(x));
      const float pr = visible ? std::exp(p.scale * sc[i][x] - s.lse[i][h]) : 0.0f;
      dp[i][x] = visible ? pr * (dp[i][x] - s.delta[i][h]) * p.scale : 0.0f;
    }
  }
  accumulate_times_columns<HD>(w, s.dq, dp, sh.k_t);
}

}  // namespace tripod::kernels::flash_mma
