// Causal attention in tiles that never hold the T x T scores (FlashAttention-2's algorithm), one
// thread block per (batch, head, 64-row tile), written once for the CUDA kernels
// (backend/cuda/kernels/flash_attention.cu) and for the host replay in
// suites/unit/test_flash_attention_block.cpp.
//
// Every block algorithm below is a sequence of phases separated by block barriers. An executor
// runs them: on the device each thread runs its own share of a phase and `sync()` is
// __syncthreads(); on the host one loop runs every thread's share in turn and `sync()` does
// nothing, which gives the same result because no phase reads what another thread writes in that
// phase. The tile products are the executor's `product` (bf16 tensor cores on the device, a plain
// loop on the host), on operands in the block's shared memory, so the replay checks every index,
// mask, bound and rounding point of the kernels; only the order of the products' fp32 sums differs.
//
// Forward (one block per query tile):  for each key tile kt <= qt
//   S = Q K^T (bf16 q, k; fp32 sums), s = scale * S, masked past the diagonal
//   m' = max(m, max_j s_j);  p_j = exp(s_j - m') (rounded to bf16 for the product);
//   l = l * exp(m - m') + sum_j p_j;  O = O * exp(m - m') + P V;  m = m'
// then out = O / l, and the row's logsumexp m + log(l) is what the backward needs of the softmax:
// B*H*T floats instead of the B*H*T*T probabilities.
// Backward (two kernels, each gradient element summed by one block in a fixed order, no atomics):
//   D_t = sum_d dO[t, d] * out[t, d]                   (= sum_j P_tj dP_tj)
//   per key tile:   P = exp(s - lse), dP = dO V^T, dS = P * (dP - D) * scale  (rounded to bf16)
//                   dV += P^T dO,  dK += dS^T Q        over the query tiles qt >= kt
//   per query tile: the same P, dS;  dQ += dS K          over the key tiles kt <= qt
// Against the CPU backend's bf16-operand attention (cpu/attention_kernels.cpp, which rounds the
// normalised probabilities), the probabilities here are rounded before the division by l, so the
// two differ by about one bf16 rounding of each probability, not only in the order of sums.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/host_device.h"
#include "core/dtype.h"  // bf16

namespace tripod::kernels::flash {

inline constexpr int kTile = 64;  // query rows and key rows a tile
inline constexpr int kWarps = 4;  // warp w's products cover rows [16w, 16w + 16) of a tile
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kSide = 16;  // a tensor-core product's output tile is kSide x kSide

// The head sizes the kernels are built for (a product's inner dimension is a multiple of 16).
TRIPOD_HD bool supported_head_dim(int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

// Leading dimensions in shared memory, in elements: multiples of 8 (bf16) and 4 (fp32) as the
// tensor-core loads need, padded past the tile's width so that a column's rows fall in different
// banks.
template <int HD>
struct Strides {
  static constexpr int kOperand = HD + 8;  // bf16 [kTile][HD]: q, k, v, dout
  static constexpr int kSquare = kTile + 4;  // fp32 [kTile][kTile]: scores, dprobs
  static constexpr int kSquare16 = kTile + 8;  // bf16 [kTile][kTile]: probabilities, score gradients
  static constexpr int kAccumulator = HD + 4;  // fp32 [kTile][HD]: out, dq, dk, dv
};

template <int HD>
struct ForwardShared {
  using S = Strides<HD>;
  alignas(128) bf16 q[kTile * S::kOperand];
  alignas(128) bf16 k[kTile * S::kOperand];
  alignas(128) bf16 v[kTile * S::kOperand];
  alignas(128) float scores[kTile * S::kSquare];
  alignas(128) bf16 probs[kTile * S::kSquare16];
  alignas(128) float out[kTile * S::kAccumulator];
  float row_max[kTile], row_sum[kTile];
};

template <int HD>
struct BackwardShared {
  using S = Strides<HD>;
  alignas(128) bf16 q[kTile * S::kOperand];
  alignas(128) bf16 dout[kTile * S::kOperand];
  alignas(128) bf16 k[kTile * S::kOperand];
  alignas(128) bf16 v[kTile * S::kOperand];
  alignas(128) float scores[kTile * S::kSquare];
  alignas(128) float dprobs[kTile * S::kSquare];
  alignas(128) bf16 probs[kTile * S::kSquare16];
  alignas(128) bf16 score_grads[kTile * S::kSquare16];
  alignas(128) float grad_a[kTile * S::kAccumulator];  // dk (key tiles) or dq (query tiles)
  alignas(128) float grad_b[kTile * S::kAccumulator];  // dv (key tiles)
  float lse[kTile], delta[kTile];
};

// The tensors: qkv [B,T,3C] (q | k | v, head h in columns [h*hd, (h+1)*hd) of each third), out and
// dout [B,T,C], the row states lse and delta [B*H, T].
struct Problem {
  int64_t batch = 0, seq_len = 0, channels = 0, n_head = 0;
  float scale = 1;  // 1/sqrt(hd), as attention_math.h's attention_scale<float>
  TRIPOD_HD int64_t head_dim() const { return channels / n_head; }
  TRIPOD_HD int64_t pairs() const { return batch * n_head; }
  TRIPOD_HD int64_t tiles() const { return (seq_len + kTile - 1) / kTile; }
  // Element [b, t, part*C + h*hd] of qkv (part 0 q, 1 k, 2 v), pair bh = b*H + h.
  TRIPOD_HD int64_t qkv_index(int64_t bh, int64_t t, int part) const {
    return (bh / n_head * seq_len + t) * 3 * channels + part * channels + bh % n_head * head_dim();
  }
  TRIPOD_HD int64_t token_index(int64_t bh, int64_t t) const {  // [b, t, h*hd] of out, dout
    return (bh / n_head * seq_len + t) * channels + bh % n_head * head_dim();
  }
  TRIPOD_HD int rows_in_tile(int64_t tile) const {
    const int64_t left = seq_len - tile * kTile;
    return static_cast<int>(left < kTile ? left : kTile);
  }
};

// Grid position -> (pair, tile): the tiles with the most work first (a query tile's work grows
// with its index, a key tile's shrinks), so the last blocks to start are short ones.
struct BlockPlace {
  int64_t pair, tile;
};
TRIPOD_HD BlockPlace place_of_block(int64_t block, const Problem& p, bool heavy_last_tiles) {
  const int64_t rank = block / p.pairs();
  return {block % p.pairs(), heavy_last_tiles ? p.tiles() - 1 - rank : rank};
}

TRIPOD_HD bf16 to_bf16(float x) { return bf16{float_to_bf16_bits(x)}; }

// dst [kTile][HD] (leading dimension ld) = src's rows [0, rows) rounded to bf16, zeros past them
// (a zero key or value row adds nothing: its probability is an exact 0, and 0 * 0 = 0).
template <int HD, class Exec>
TRIPOD_HD void load_rows(const Exec& exec, bf16* dst, int ld, const float* src, int64_t src_ld, int rows) {
  for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid)
    for (int i = tid; i < kTile * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      dst[r * ld + d] = r < rows ? to_bf16(src[r * src_ld + d]) : bf16{};
    }
}

template <class Exec>
TRIPOD_HD void zero(const Exec& exec, float* x, int n) {
  for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid)
    for (int i = tid; i < n; i += kThreads) x[i] = 0;
}

// dst[r] = src[r] for r < rows, 0 past them; one thread a row.
template <class Exec>
TRIPOD_HD void load_row_state(const Exec& exec, float* dst, const float* src, int rows) {
  for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid)
    if (tid < kTile) dst[tid] = tid < rows ? src[tid] : 0.0f;
}

// out [kTile, kTile] fp32 (ld Strides::kSquare) = a [kTile][HD] b[kTile][HD]^T: warp w the rows
// [16w, 16w + 16).
template <int HD, class Exec>
TRIPOD_HD void row_by_row_products(const Exec& exec, float* out, const bf16* a, const bf16* b) {
  using S = Strides<HD>;
  for (int w = exec.warp_begin(); w < exec.warp_end(); ++w)
    for (int j = 0; j < kTile / kSide; ++j)
      exec.template product<false, true>(out + w * kSide * S::kSquare + j * kSide, S::kSquare, false,
                                         a + w * kSide * S::kOperand, S::kOperand, b + j * kSide * S::kOperand,
                                         S::kOperand, HD);
}

// acc [kTile][HD] fp32 += op(a) [kTile, kTile] b [kTile][HD], with op(a) = a (rows of a square
// tile, kA_transposed false) or a^T; warp w the rows [16w, 16w + 16) of acc.
template <int HD, bool kATransposed, class Exec>
TRIPOD_HD void accumulate_square_times_rows(const Exec& exec, float* acc, const bf16* a, const bf16* b) {
  using S = Strides<HD>;
  for (int w = exec.warp_begin(); w < exec.warp_end(); ++w)
    for (int j = 0; j < HD / kSide; ++j) {
      // op(a)'s rows [16w, 16w + 16): rows of a, or columns of a (a^T read column-major)
      const bf16* a_rows = kATransposed ? a + w * kSide : a + w * kSide * S::kSquare16;
      exec.template product<kATransposed, false>(acc + w * kSide * S::kAccumulator + j * kSide, S::kAccumulator,
                                                 true, a_rows, S::kSquare16, b + j * kSide, S::kOperand, kTile);
    }
}

// ---- forward ----

// Query tile qt of pair bh: out's rows and the rows' logsumexp.
template <int HD, class Exec>
TRIPOD_HD void forward_block(const Exec& exec, ForwardShared<HD>& sh, const Problem& p, const float* qkv, float* out,
                             float* lse, int64_t bh, int64_t qt) {
  using S = Strides<HD>;
  const int64_t row0 = qt * kTile, src_ld = 3 * p.channels;
  const int rows = p.rows_in_tile(qt);
  load_rows<HD>(exec, sh.q, S::kOperand, qkv + p.qkv_index(bh, row0, 0), src_ld, rows);
  zero(exec, sh.out, kTile * S::kAccumulator);
  for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid)
    if (tid < kTile) sh.row_max[tid] = -INFINITY, sh.row_sum[tid] = 0;
  exec.sync();
  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t key0 = kt * kTile;
    load_rows<HD>(exec, sh.k, S::kOperand, qkv + p.qkv_index(bh, key0, 1), src_ld, p.rows_in_tile(kt));
    load_rows<HD>(exec, sh.v, S::kOperand, qkv + p.qkv_index(bh, key0, 2), src_ld, p.rows_in_tile(kt));
    exec.sync();
    row_by_row_products<HD>(exec, sh.scores, sh.q, sh.k);
    exec.sync();
    for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid) {
      if (tid >= kTile) continue;
      // row tid is query t; it sees keys key0 + c for c < visible (>= 1: t >= row0 >= key0)
      const int64_t t = row0 + tid, last = t - key0;
      const int visible = last < kTile ? static_cast<int>(last) + 1 : kTile;
      const float* s = sh.scores + tid * S::kSquare;
      const float old_max = sh.row_max[tid];
      float new_max = old_max;
      for (int c = 0; c < visible; ++c) {
        const float x = p.scale * s[c];
        new_max = x > new_max ? x : new_max;
      }
      float sum = 0;
      bf16* prob = sh.probs + tid * S::kSquare16;
      for (int c = 0; c < kTile; ++c) {
        const float e = c < visible ? std::exp(p.scale * s[c] - new_max) : 0.0f;
        prob[c] = to_bf16(e);
        sum += e;
      }
      const float rescale = std::exp(old_max - new_max);  // 0 for the first tile (old_max -inf)
      sh.row_sum[tid] = sh.row_sum[tid] * rescale + sum;
      sh.row_max[tid] = new_max;
      float* o = sh.out + tid * S::kAccumulator;
      for (int d = 0; d < HD; ++d) o[d] *= rescale;
    }
    exec.sync();
    accumulate_square_times_rows<HD, false>(exec, sh.out, sh.probs, sh.v);
    exec.sync();
  }
  for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid) {
    for (int i = tid; i < kTile * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      if (r < rows) out[p.token_index(bh, row0 + r) + d] = sh.out[r * S::kAccumulator + d] / sh.row_sum[r];
    }
    if (tid < rows) lse[bh * p.seq_len + row0 + tid] = sh.row_max[tid] + std::log(sh.row_sum[tid]);
  }
}

// ---- backward ----

// delta[bh, t] = sum_d bf16(dout[b, t, h*hd + d]) * out[b, t, h*hd + d] in ascending d: one row.
// dout rounded as the dprobs product sees it, so that for a row of one key (P = 1) dP - delta is
// the rounding of out alone, not of dout too.
TRIPOD_HD float delta_of_row(const Problem& p, const float* dout, const float* out, int64_t row) {
  const int64_t bh = row / p.seq_len, t = row % p.seq_len, at = p.token_index(bh, t);
  float sum = 0;
  for (int64_t d = 0; d < p.head_dim(); ++d) sum += bf16_bits_to_float(float_to_bf16_bits(dout[at + d])) * out[at + d];
  return sum;
}

// From the tile's scores and dprobs: probs (when asked) and the score gradients, rounded to bf16;
// exact zeros where the query is past T or the key past the query.
template <int HD, class Exec>
TRIPOD_HD void score_grads_of_tile(const Exec& exec, BackwardShared<HD>& sh, const Problem& p, int64_t row0,
                                   int64_t key0, bool keep_probs) {
  using S = Strides<HD>;
  for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid) {
    if (tid >= kTile) continue;
    const int64_t t = row0 + tid;
    const float* s = sh.scores + tid * S::kSquare;
    const float* dp = sh.dprobs + tid * S::kSquare;
    bf16* prob = sh.probs + tid * S::kSquare16;
    bf16* ds = sh.score_grads + tid * S::kSquare16;
    for (int c = 0; c < kTile; ++c) {
      const bool visible = t < p.seq_len && key0 + c <= t;
      const float pr = visible ? std::exp(p.scale * s[c] - sh.lse[tid]) : 0.0f;
      if (keep_probs) prob[c] = to_bf16(pr);
      ds[c] = to_bf16(visible ? pr * (dp[c] - sh.delta[tid]) * p.scale : 0.0f);
    }
  }
}

// The scores and dprobs of query tile (row0, rows) against the key tile in sh.k, sh.v (with
// sh.q, sh.dout, sh.lse, sh.delta loaded), then the score gradients: three phases.
template <int HD, class Exec>
TRIPOD_HD void tile_score_grads(const Exec& exec, BackwardShared<HD>& sh, const Problem& p, int64_t row0,
                                int64_t key0, bool keep_probs) {
  row_by_row_products<HD>(exec, sh.scores, sh.q, sh.k);
  row_by_row_products<HD>(exec, sh.dprobs, sh.dout, sh.v);
  exec.sync();
  score_grads_of_tile<HD>(exec, sh, p, row0, key0, keep_probs);
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
  for (int tid = exec.thread_begin(); tid < exec.thread_end(); ++tid)
    for (int i = tid; i < kTile * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      if (r < rows) dqkv[p.qkv_index(bh, row0 + r, part) + d] = acc[r * Strides<HD>::kAccumulator + d];
    }
}

// Key tile kt of pair bh: dk and dv of its rows, over the query tiles that see them.
template <int HD, class Exec>
TRIPOD_HD void key_grads_block(const Exec& exec, BackwardShared<HD>& sh, const Problem& p, const float* qkv,
                               const float* dout, const float* lse, const float* delta, float* dqkv, int64_t bh,
                               int64_t kt) {
  using S = Strides<HD>;
  load_key_tile<HD>(exec, sh, p, qkv, bh, kt);
  zero(exec, sh.grad_a, kTile * S::kAccumulator);
  zero(exec, sh.grad_b, kTile * S::kAccumulator);
  for (int64_t qt = kt; qt < p.tiles(); ++qt) {
    load_query_tile<HD>(exec, sh, p, qkv, dout, lse, delta, bh, qt);
    exec.sync();
    tile_score_grads<HD>(exec, sh, p, qt * kTile, kt * kTile, true);
    accumulate_square_times_rows<HD, true>(exec, sh.grad_b, sh.probs, sh.dout);     // dv += P^T dO
    accumulate_square_times_rows<HD, true>(exec, sh.grad_a, sh.score_grads, sh.q);  // dk += dS^T Q
    exec.sync();
  }
  store_gradient_rows<HD>(exec, dqkv, sh.grad_a, p, bh, kt * kTile, p.rows_in_tile(kt), 1);
  store_gradient_rows<HD>(exec, dqkv, sh.grad_b, p, bh, kt * kTile, p.rows_in_tile(kt), 2);
}

// Query tile qt of pair bh: dq of its rows, over the key tiles it sees.
template <int HD, class Exec>
TRIPOD_HD void query_grads_block(const Exec& exec, BackwardShared<HD>& sh, const Problem& p, const float* qkv,
                                 const float* dout, const float* lse, const float* delta, float* dqkv, int64_t bh,
                                 int64_t qt) {
  load_query_tile<HD>(exec, sh, p, qkv, dout, lse, delta, bh, qt);
  zero(exec, sh.grad_a, kTile * Strides<HD>::kAccumulator);
  for (int64_t kt = 0; kt <= qt; ++kt) {
    load_key_tile<HD>(exec, sh, p, qkv, bh, kt);
    exec.sync();
    tile_score_grads<HD>(exec, sh, p, qt * kTile, kt * kTile, false);
    accumulate_square_times_rows<HD, false>(exec, sh.grad_a, sh.score_grads, sh.k);  // dq += dS K
    exec.sync();
  }
  store_gradient_rows<HD>(exec, dqkv, sh.grad_a, p, bh, qt * kTile, p.rows_in_tile(qt), 0);
}

}  // namespace tripod::kernels::flash
