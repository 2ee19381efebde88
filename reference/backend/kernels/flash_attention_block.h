// Causal attention in tiles that never hold the T x T scores (FlashAttention-2's algorithm), one
// thread block per (batch, head, 64-row tile): the tiles, their loads and products and the forward
// here, the backward in flash_attention_backward.h. Written once for the CUDA kernels
// (backend/cuda/kernels/flash_attention.cu) and for the host (backend/cpu/flash_host_block.h's
// executor: the emulated device's flash attention, and the replay in
// suites/unit/test_flash_attention_block.cpp).
//
// Every block algorithm below is a sequence of phases separated by block barriers. An executor
// runs them: on the device each thread runs its own share of a phase (the thread range
// [thread_begin, thread_end) by step is that thread, the warp range its warp) and `sync()` is
// __syncthreads(); on the host one loop runs every
// thread's share in turn and `sync()` does nothing, which gives the same result because no phase
// reads what another thread writes in that phase. The host executor also runs each loop's threads
// in descending order: a loop in which one thread reads what another writes would then give
// other bits, and the replay test requires the same. (That does not show a barrier missing
// between two loops: the host finishes one loop before the next either way. compute-sanitizer's
// racecheck, in gpu-check's flash step, does.) The tile products are the executor's `product` (bf16 tensor cores on the device, a plain
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
//   D_t = sum_d bf16(dO[t, d]) * out[t, d]             (= sum_j P_tj dP_tj)
//   per key tile:   P = exp(s - lse), dP = dO V^T, dS = P * (dP - D) * scale  (rounded to bf16)
//                   dV += P^T dO,  dK += dS^T Q        over the query tiles qt >= kt
//   per query tile: the same P, dS;  dQ += dS K          over the key tiles kt <= qt
// Against the CPU backend's bf16-operand attention (cpu/attention_kernels.cpp, which rounds the
// normalised probabilities), the probabilities here are rounded before the division by l, so the
// two differ by about one bf16 rounding of each probability, not only in the order of sums.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/host_device.h"
#include "core/dtype.h"  // bf16

namespace tripod::kernels::flash {

inline constexpr int kTile = 64;  // query rows and key rows a tile
inline constexpr int kWarps = 8;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kSide = 16;  // a tensor-core product's output tile is kSide x kSide
// The row phases: thread tid takes row tid / kRowThreads and, of its kTile columns, those
// c = tid % kRowThreads + kRowThreads * i. A warp's lanes then cover 8 rows x 4 column offsets:
// with the fp32 rows kTile + 4 apart, 32 different shared-memory banks.
inline constexpr int kRowThreads = kThreads / kTile;

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
  float row_max[kTile], row_sum[kTile], next_max[kTile];
  float part_max[kTile * kRowThreads], part_sum[kTile * kRowThreads];  // each row thread's share
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

// f(std::integral_constant<int, HD>{}) for a supported head size (the launchers' dispatch; host code).
template <class F>
void with_head_dim(int64_t head_dim, F&& f) {
  switch (head_dim) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    default: return f(std::integral_constant<int, 128>{});  // supported_head_dim: 16, 32, 64, 128
  }
}

TRIPOD_HD bf16 to_bf16(float x) { return bf16{float_to_bf16_bits(x)}; }

// v = p[0..3]: one 16-byte load on the device (p 16-byte aligned: the launchers check qkv and
// dout, and every row and head offset is a multiple of 4 floats).
TRIPOD_HD void load_four(const float* p, float (&v)[4]) {
#ifdef __CUDA_ARCH__
  const float4 f = *reinterpret_cast<const float4*>(p);
  v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
#else
  for (int e = 0; e < 4; ++e) v[e] = p[e];
#endif
}

// dst[0..3] = v rounded to bf16: one 8-byte store on the device (dst 8-byte aligned: a shared
// operand's rows are multiples of 16 bytes, and d a multiple of 4).
TRIPOD_HD void store_four(bf16* dst, const float (&v)[4]) {
#ifdef __CUDA_ARCH__
  const uint32_t lo = float_to_bf16_bits(v[0]) | static_cast<uint32_t>(float_to_bf16_bits(v[1])) << 16;
  const uint32_t hi = float_to_bf16_bits(v[2]) | static_cast<uint32_t>(float_to_bf16_bits(v[3])) << 16;
  *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
#else
  for (int e = 0; e < 4; ++e) dst[e] = to_bf16(v[e]);
#endif
}

// dst [kTile][HD] (leading dimension ld) = src's rows [0, rows) rounded to bf16, zeros past them
// (a zero key or value row adds nothing: its probability is an exact 0, and 0 * 0 = 0). Four
// consecutive elements a thread: a warp reads 512 contiguous bytes of a row or two, in 16-byte loads.
template <int HD, class Exec>
TRIPOD_HD void load_rows(const Exec& exec, bf16* dst, int ld, const float* src, int64_t src_ld, int rows) {
  static_assert(HD % 4 == 0, "rows are loaded in groups of four");
  for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step())
    for (int g = tid; g < kTile * HD / 4; g += kThreads) {
      const int r = g / (HD / 4), d = g % (HD / 4) * 4;
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (r < rows) load_four(src + r * src_ld + d, v);
      store_four(dst + r * ld + d, v);
    }
}

template <class Exec>
TRIPOD_HD void zero(const Exec& exec, float* x, int n) {
  for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step())
    for (int i = tid; i < n; i += kThreads) x[i] = 0;
}

// dst[r] = src[r] for r < rows, 0 past them; one thread a row.
template <class Exec>
TRIPOD_HD void load_row_state(const Exec& exec, float* dst, const float* src, int rows) {
  for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step())
    if (tid < kTile) dst[tid] = tid < rows ? src[tid] : 0.0f;
}

// The warps [first, first + count) share a product's 16 x 16 output tiles t = 0, 1, ... (row
// block t % 4, column block t / 4): warp first + i takes t = i, i + count, ...

// out [kTile, kTile] fp32 (ld Strides::kSquare) = a [kTile][HD] b [kTile][HD]^T.
template <int HD, class Exec>
TRIPOD_HD void row_by_row_products(const Exec& exec, int first, int count, float* out, const bf16* a, const bf16* b) {
  using S = Strides<HD>;
  for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step()) {
    if (w < first || w >= first + count) continue;
    for (int t = w - first; t < (kTile / kSide) * (kTile / kSide); t += count) {
      const int i = t % (kTile / kSide), j = t / (kTile / kSide);
      exec.template product<false, true>(out + i * kSide * S::kSquare + j * kSide, S::kSquare, false,
                                         a + i * kSide * S::kOperand, S::kOperand, b + j * kSide * S::kOperand,
                                         S::kOperand, HD);
    }
  }
}

// out [kTile][HD] fp32 += probs [kTile, kTile] v [kTile][HD] (the forward's out, which is rescaled
// between tiles and so stays in shared memory; the backward's gradients stay in registers).
template <int HD, class Exec>
TRIPOD_HD void accumulate_probs_times_values(const Exec& exec, float* out, const bf16* probs, const bf16* v) {
  using S = Strides<HD>;
  for (int w = exec.warp_begin(); w != exec.warp_end(); w += exec.step())
    for (int t = w; t < (kTile / kSide) * (HD / kSide); t += kWarps) {
      const int i = t % (kTile / kSide), j = t / (kTile / kSide);
      exec.template product<false, false>(out + i * kSide * S::kAccumulator + j * kSide, S::kAccumulator, true,
                                          probs + i * kSide * S::kSquare16, S::kSquare16, v + j * kSide, S::kOperand,
                                          kTile);
    }
}

// ---- forward ----

static_assert(kRowThreads == 4, "forward_block adds the row threads' sums as (0 + 1) + (2 + 3)");

// The keys of a key tile starting at key0 that query t sees: c < visible_keys (t >= key0).
TRIPOD_HD int visible_keys(int64_t t, int64_t key0) {
  const int64_t last = t - key0;
  return last < kTile ? static_cast<int>(last) + 1 : kTile;
}

// max(old max, the row threads' maxima).
TRIPOD_HD float row_max_after(float old_max, const float* parts) {
  float m = old_max;
  for (int i = 0; i < kRowThreads; ++i) m = parts[i] > m ? parts[i] : m;
  return m;
}

// Query tile qt of pair bh: out's rows and the rows' logsumexp; out's rows also into out_copy
// (the copy of out the backward reads, kept in the attention state) where it is not null.
template <int HD, class Exec>
TRIPOD_HD void forward_block(const Exec& exec, ForwardShared<HD>& sh, const Problem& p, const float* qkv, float* out,
                             float* out_copy, float* lse, int64_t bh, int64_t qt) {
  using S = Strides<HD>;
  const int64_t row0 = qt * kTile, src_ld = 3 * p.channels;
  const int rows = p.rows_in_tile(qt);
  load_rows<HD>(exec, sh.q, S::kOperand, qkv + p.qkv_index(bh, row0, 0), src_ld, rows);
  zero(exec, sh.out, kTile * S::kAccumulator);
  for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step())
    if (tid < kTile) sh.row_max[tid] = -INFINITY, sh.row_sum[tid] = 0;
  exec.sync();
  for (int64_t kt = 0; kt <= qt; ++kt) {
    const int64_t key0 = kt * kTile;
    load_rows<HD>(exec, sh.k, S::kOperand, qkv + p.qkv_index(bh, key0, 1), src_ld, p.rows_in_tile(kt));
    load_rows<HD>(exec, sh.v, S::kOperand, qkv + p.qkv_index(bh, key0, 2), src_ld, p.rows_in_tile(kt));
    exec.sync();
    row_by_row_products<HD>(exec, 0, kWarps, sh.scores, sh.q, sh.k);
    exec.sync();
    // Row r (query t = row0 + r) sees keys key0 + c for c < visible (>= 1: t >= row0 >= key0).
    // Each row thread's max over its columns, then (next phase) the row's.
    for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step()) {
      const int r = tid / kRowThreads, part = tid % kRowThreads;
      const int visible = visible_keys(row0 + r, key0);
      const float* s = sh.scores + r * S::kSquare;
      float m = -INFINITY;
      for (int c = part; c < visible; c += kRowThreads) {
        const float x = p.scale * s[c];
        m = x > m ? x : m;
      }
      sh.part_max[tid] = m;
    }
    exec.sync();
    // p_c = exp(s_c - new max), rounded to bf16 for the product; each row thread's sum of the fp32
    // p_c; its share of the row's out rescaled by exp(old max - new max) (0 on the first tile).
    for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step()) {
      const int r = tid / kRowThreads, part = tid % kRowThreads;
      const int visible = visible_keys(row0 + r, key0);
      const float new_max = row_max_after(sh.row_max[r], sh.part_max + r * kRowThreads);
      const float* s = sh.scores + r * S::kSquare;
      bf16* prob = sh.probs + r * S::kSquare16;
      float sum = 0;
      for (int c = part; c < kTile; c += kRowThreads) {
        const float e = c < visible ? std::exp(p.scale * s[c] - new_max) : 0.0f;
        prob[c] = to_bf16(e);
        sum += e;
      }
      sh.part_sum[tid] = sum;
      const float rescale = std::exp(sh.row_max[r] - new_max);
      float* o = sh.out + r * S::kAccumulator;
      for (int d = part * (HD / kRowThreads); d < (part + 1) * (HD / kRowThreads); ++d) o[d] *= rescale;
      if (part == 0) sh.next_max[r] = new_max;
    }
    exec.sync();
    // out += P V (the warps) and the rows' running sum and max (a thread a row): disjoint data.
    accumulate_probs_times_values<HD>(exec, sh.out, sh.probs, sh.v);
    for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step()) {
      if (tid >= kTile) continue;
      const float* parts = sh.part_sum + tid * kRowThreads;
      const float rescale = std::exp(sh.row_max[tid] - sh.next_max[tid]);
      sh.row_sum[tid] = sh.row_sum[tid] * rescale + ((parts[0] + parts[1]) + (parts[2] + parts[3]));
      sh.row_max[tid] = sh.next_max[tid];
    }
    exec.sync();
  }
  for (int tid = exec.thread_begin(); tid != exec.thread_end(); tid += exec.step()) {
    for (int i = tid; i < kTile * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      if (r >= rows) continue;
      const int64_t index = p.token_index(bh, row0 + r) + d;
      const float value = sh.out[r * S::kAccumulator + d] / sh.row_sum[r];
      out[index] = value;
      if (out_copy != nullptr) out_copy[index] = value;
    }
    if (tid < rows) lse[bh * p.seq_len + row0 + tid] = sh.row_max[tid] + std::log(sh.row_sum[tid]);
  }
}

}  // namespace tripod::kernels::flash
