// The flash attention's backward blocks (the algorithm, the executors and the tiles:
// flash_attention_block.h): delta = rowsum(bf16(dO) * out) per row, then one kernel per key tile
// (dK, dV over the query tiles that see it) and one per query tile (dQ over its key tiles), each
// recomputing the probabilities from the forward's logsumexp. Every gradient element is summed by
// one block in a fixed order: no atomics.
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/kernels/flash_attention_block.h"

namespace tripod::kernels::flash {

// The query-gradient kernel's shared memory; the key-gradient kernel's adds the probabilities. The
// gradients themselves add up in the warps' accumulators (registers on the device) and pass
// through grad_a only at the end.
template <int HD>
struct BackwardShared {
  using S = Strides<HD>;
  alignas(128) bf16 q[kTile * S::kOperand];
  alignas(128) bf16 dout[kTile * S::kOperand];
  alignas(128) bf16 k[kTile * S::kOperand];
  alignas(128) bf16 v[kTile * S::kOperand];
  alignas(128) float scores[kTile * S::kSquare];
  alignas(128) float dprobs[kTile * S::kSquare];
  alignas(128) bf16 score_grads[kTile * S::kSquare16];
  alignas(128) float grad_a[kTile * S::kAccumulator];  // a gradient's tiles on their way out
  float lse[kTile], delta[kTile];
};
template <int HD>
struct KeyGradsShared : BackwardShared<HD> {
  alignas(128) bf16 probs[kTile * Strides<HD>::kSquare16];
};

// An element of dout as the dprobs product sees it: rounded to bf16 (a bf16 dout, the model's
// where Backend::attention_input_dtype says bf16, is that rounding already).
TRIPOD_HD float dout_as_operand(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
TRIPOD_HD float dout_as_operand(bf16 x) { return bf16_bits_to_float(x.bits); }

// delta[bh, t] = sum_d bf16(dout[b, t, h*hd + d]) * out[b, t, h*hd + d] in ascending d: one row.
// dout rounded as the dprobs product sees it, so that for a row of one key (P = 1) dP - delta is
// the rounding of out alone, not of dout too; so an fp32 dout and its bf16 copy give the same bits.
template <typename DOut>
TRIPOD_HD float delta_of_row(const Problem& p, const DOut* dout, const float* out, int64_t row) {
  const int64_t bh = row / p.seq_len, t = row % p.seq_len, at = p.token_index(bh, t);
  float sum = 0;
  for (int64_t d = 0; d < p.head_dim(); ++d) sum += dout_as_operand(dout[at + d]) * out[at + d];
  return sum;
}

// From the tile's scores and dprobs: probs (key tiles) and the score gradients, rounded to bf16;
// exact zeros where the query is past T or the key past the query.
template <int HD, class Shared, class Exec>
TRIPOD_HD void score_grads_of_tile(const Exec& exec, Shared& sh, const Problem& p, int64_t row0, int64_t key0) {
  using S = Strides<HD>;
  constexpr bool kKeepProbs = !std::is_same_v<Shared, BackwardShared<HD>>;
  for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step()) {
    const int r = tid / kRowThreads;
    const int64_t t = row0 + r;
    const float* s = sh.scores + r * S::kSquare;
    const float* dp = sh.dprobs + r * S::kSquare;
    bf16* ds = sh.score_grads + r * S::kSquare16;
    for (int c = tid % kRowThreads; c < kTile; c += kRowThreads) {
      const bool visible = t < p.seq_len && key0 + c <= t;
      const float pr = visible ? std::exp(p.scale * s[c] - sh.lse[r]) : 0.0f;
      if constexpr (kKeepProbs) sh.probs[r * S::kSquare16 + c] = to_bf16(pr);
      ds[c] = to_bf16(visible ? pr * (dp[c] - sh.delta[r]) * p.scale : 0.0f);
    }
  }
}

// The scores and dprobs of the query tile at row0 against the key tile in sh.k, sh.v (with
// sh.q, sh.dout, sh.lse, sh.delta loaded), then the score gradients: three phases.
template <int HD, class Shared, class Exec>
TRIPOD_HD void tile_score_grads(const Exec& exec, Shared& sh, const Problem& p, int64_t row0, int64_t key0) {
  row_by_row_products<HD>(exec, 0, kWarps / 2, sh.scores, sh.q, sh.k);
  row_by_row_products<HD>(exec, kWarps / 2, kWarps / 2, sh.dprobs, sh.dout, sh.v);
  exec.sync();
  score_grads_of_tile<HD>(exec, sh, p, row0, key0);
  exec.sync();
}

template <int HD, class Exec>
TRIPOD_HD void load_query_tile(const Exec& exec, BackwardShared<HD>& sh, const Problem& p, const float* qkv,
                               const float* dout, const float* lse, const float* delta, int64_t bh, int64_t qt) {
  using S = Strides<HD>;
  const int64_t row0 = qt * kTile;
  const int rows = p.rows_in_tile(qt);
  load_rows<HD>(exec, sh.q, S::kOperand, qkv + p.qkv_index(bh, row0, 0), 3 * p.channels, rows);
  load_rows<HD>(exec, sh.dout, S::kOperand, dout + p.token_index(bh, row0), p.channels, rows);
  load_row_state(exec, sh.lse, lse + bh * p.seq_len + row0, rows);
  load_row_state(exec, sh.delta, delta + bh * p.seq_len + row0, rows);
}

template <int HD, class Exec>
TRIPOD_HD void load_key_tile(const Exec& exec, BackwardShared<HD>& sh, const Problem& p, const float* qkv, int64_t bh,
                             int64_t kt) {
  using S = Strides<HD>;
  const int64_t key0 = kt * kTile;
  load_rows<HD>(exec, sh.k, S::kOperand, qkv + p.qkv_index(bh, key0, 1), 3 * p.channels, p.rows_in_tile(kt));
  load_rows<HD>(exec, sh.v, S::kOperand, qkv + p.qkv_index(bh, key0, 2), 3 * p.channels, p.rows_in_tile(kt));
}

// Rows [0, rows) of acc [kTile][HD] into part `part` of dqkv at tile row0.
template <int HD, class Exec>
TRIPOD_HD void store_gradient_rows(const Exec& exec, float* dqkv, const float* acc, const Problem& p, int64_t bh,
                                   int64_t row0, int rows, int part) {
  for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step())
    for (int i = tid; i < kTile * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      if (r < rows) dqkv[p.qkv_index(bh, row0 + r, part) + d] = acc[r * Strides<HD>::kAccumulator + d];
    }
}

// The backward's gradients add up in each warp's accumulators, `typename Exec::template
// Accumulators<N>`: N 16 x 16 fp32 tiles a warp (registers on the device), reached through the
// executor with the warp's index (the host keeps every warp's): zero_accumulators(acc, w),
// accumulate<kATransposed, kBTransposed>(acc, w, m, a, lda, b, ldb, k) (tile m += op(a) op(b), as
// product), store_accumulator(acc, w, m, c, ldc).

// Key tile kt of pair bh: dk and dv of its rows, over the query tiles that see them. Warp w holds
// row block w % 4 of dv (w < 4) or dk, every column block.
template <int HD, class Exec>
TRIPOD_HD void key_grads_block(const Exec& exec, KeyGradsShared<HD>& sh, const Problem& p, const float* qkv,
                               const float* dout, const float* lse, const float* delta, float* dqkv, int64_t bh,
                               int64_t kt) {
  using S = Strides<HD>;
  constexpr int kColumnBlocks = HD / kSide;
  static_assert(kWarps == 2 * (kTile / kSide), "four warps for dv's row blocks, four for dk's");
  typename Exec::template Accumulators<kColumnBlocks> grad;
  load_key_tile<HD>(exec, sh, p, qkv, bh, kt);
  for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step()) exec.zero_accumulators(grad, w);
  for (int64_t qt = kt; qt < p.tiles(); ++qt) {
    load_query_tile<HD>(exec, sh, p, qkv, dout, lse, delta, bh, qt);
    exec.sync();
    tile_score_grads<HD>(exec, sh, p, qt * kTile, kt * kTile);
    // dv += P^T dO, dk += dS^T Q: op(a) = a^T, rows [16i, 16i + 16) are a's columns
    for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step()) {
      const bool dv = w < kWarps / 2;
      const bf16* a = (dv ? sh.probs : sh.score_grads) + (w % (kWarps / 2)) * kSide;
      const bf16* b = dv ? sh.dout : sh.q;
      TRIPOD_UNROLL
      for (int m = 0; m < kColumnBlocks; ++m)
        exec.template accumulate<true, false>(grad, w, m, a, S::kSquare16, b + m * kSide, S::kOperand, kTile);
    }
    exec.sync();
  }
  for (int part = 2; part >= 1; --part) {  // dv, then dk, through grad_a
    for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step()) {
      if ((w < kWarps / 2) != (part == 2)) continue;
      TRIPOD_UNROLL
      for (int m = 0; m < kColumnBlocks; ++m)
        exec.store_accumulator(grad, w, m, sh.grad_a + (w % (kWarps / 2)) * kSide * S::kAccumulator + m * kSide,
                               S::kAccumulator);
    }
    exec.sync();
    store_gradient_rows<HD>(exec, dqkv, sh.grad_a, p, bh, kt * kTile, p.rows_in_tile(kt), part);
    exec.sync();
  }
}

// Query tile qt of pair bh: dq of its rows, over the key tiles it sees. Warp w holds row block
// w % 4, column blocks w / 4, w / 4 + 2, ...
template <int HD, class Exec>
TRIPOD_HD void query_grads_block(const Exec& exec, BackwardShared<HD>& sh, const Problem& p, const float* qkv,
                                 const float* dout, const float* lse, const float* delta, float* dqkv, int64_t bh,
                                 int64_t qt) {
  using S = Strides<HD>;
  constexpr int kRowBlocks = kTile / kSide, kColumnBlocks = HD / kSide;
  constexpr int kGroups = kWarps / kRowBlocks, kPerWarp = (kColumnBlocks + kGroups - 1) / kGroups;
  typename Exec::template Accumulators<kPerWarp> grad;
  load_query_tile<HD>(exec, sh, p, qkv, dout, lse, delta, bh, qt);
  for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step()) exec.zero_accumulators(grad, w);
  for (int64_t kt = 0; kt <= qt; ++kt) {
    load_key_tile<HD>(exec, sh, p, qkv, bh, kt);
    exec.sync();
    tile_score_grads<HD>(exec, sh, p, qt * kTile, kt * kTile);
    for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step()) {  // dq += dS K
      const bf16* a = sh.score_grads + (w % kRowBlocks) * kSide * S::kSquare16;
      TRIPOD_UNROLL
      for (int m = 0; m < kPerWarp; ++m) {
        const int j = w / kRowBlocks + kGroups * m;
        if (j < kColumnBlocks)
          exec.template accumulate<false, false>(grad, w, m, a, S::kSquare16, sh.k + j * kSide, S::kOperand, kTile);
      }
    }
    exec.sync();
  }
  for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step()) {
    TRIPOD_UNROLL
    for (int m = 0; m < kPerWarp; ++m) {
      const int j = w / kRowBlocks + kGroups * m;
      if (j < kColumnBlocks)
        exec.store_accumulator(grad, w, m, sh.grad_a + (w % kRowBlocks) * kSide * S::kAccumulator + j * kSide,
                               S::kAccumulator);
    }
  }
  exec.sync();
  store_gradient_rows<HD>(exec, dqkv, sh.grad_a, p, bh, qt * kTile, p.rows_in_tile(qt), 0);
}

}  // namespace tripod::kernels::flash
