// Causal multi-head self-attention on the CPU: one (batch, head) pair per OpenMP iteration, its
// small GEMMs through OpenBLAS (single-threaded inside the parallel loop), softmax by hand.
//
// The products skip the masked key blocks: queries are split into row blocks of about
// kCausalBlockRows rows, and block [r0, r1) multiplies only keys [0, r1) (query t sees keys
// j <= t); for the key-side gradients, key block [c0, c1) only queries [c0, T). At T = 1024 that
// is 9/16 of the T x T products instead of all of them; up to 2 * kCausalBlockRows - 1 rows there
// is one block, the whole square, as before. The masked entries of probs and of the score
// gradients are exact zeros either way, so only the order of the sums can differ.
//
// bf16 operands (the bf16-mixed policy, fp32 only): every product's operands are rounded to bf16
// (nearest even) first, where PyTorch's bf16 autocast and a GPU's bf16 tensor cores have them: q, k,
// v and dout as they come in, probs for the values and dvalue products, the score gradients (after
// the scale) for dquery and dkey. The products of rounded values are exact in fp32; the softmax,
// its row sums and the stored probs stay fp32. The CUDA backend rounds at the same points
// (backend/cuda/kernels/attention.cu), so the two agree up to the order of the sums.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/kernels/attention_math.h"
#include "core/bf16.h"

namespace tripod::cpu {
namespace {

constexpr int64_t kCausalBlockRows = 128;

// Row blocks [begin(r), begin(r + 1)) for r < count, covering [0, T).
struct CausalBlocks {
  int64_t seq_len, count;
  explicit CausalBlocks(int64_t t) : seq_len(t), count(std::max<int64_t>(1, t / kCausalBlockRows)) {}
  int64_t begin(int64_t r) const { return kernels::causal_block_begin(r, seq_len, count); }
};

template <typename T>
void round_in_place(T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
}

// The operand a product sees: x itself, or (round) x[0:n] rounded to bf16 and widened back, held in
// `storage` (reused from call to call).
template <typename T>
const T* product_operand(const T* x, int64_t n, bool round, std::vector<T>& storage) {
  if (!round) return x;
  storage.assign(x, x + n);
  round_in_place(storage.data(), n);
  return storage.data();
}

}  // namespace

// qkv[B,T,3C]: for head h, q = columns [h*hd, (h+1)*hd), k = C + those, v = 2C + those.
// out[B,T,C] (head h in columns [h*hd, (h+1)*hd)); probs[B,H,T,T] lower-triangular softmax.
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t batch, int64_t seq_len, int64_t channels,
                       int64_t n_head, bool bf16_operands) {
  const int64_t hd = channels / n_head, ld = 3 * channels;
  const T scale = static_cast<T>(1) / std::sqrt(static_cast<T>(hd));
  const bool round = bf16_operands && std::is_same_v<T, float>;
  std::vector<T> qkv_rounded;
  const T* operands = product_operand(qkv, batch * seq_len * ld, round, qkv_rounded);
#pragma omp parallel
  {
    std::vector<T> probs_rounded;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < batch * n_head; ++bh) {
      const int64_t b = bh / n_head, h = bh % n_head;
      const T* q = operands + b * seq_len * ld + h * hd;
      const T* k = q + channels;
      const T* v = q + 2 * channels;
      T* p = probs + bh * seq_len * seq_len;
      const CausalBlocks blocks(seq_len);
      // scores[r0:r1, 0:r1] = scale * q[r0:r1, hd] @ k[0:r1, hd]^T, per row block
      for (int64_t r = 0; r < blocks.count; ++r) {
        const int64_t r0 = blocks.begin(r), r1 = blocks.begin(r + 1);
        gemm<T>(false, true, r1 - r0, r1, hd, scale, q + r0 * ld, ld, k, ld, T(0), p + r0 * seq_len, seq_len);
      }
      for (int64_t t = 0; t < seq_len; ++t) {
        T* row = p + t * seq_len;
        T row_max = *std::max_element(row, row + t + 1);
        T denom = 0;
        for (int64_t j = 0; j <= t; ++j) {
          row[j] = std::exp(row[j] - row_max);
          denom += row[j];
        }
        for (int64_t j = 0; j <= t; ++j) row[j] /= denom;
        std::fill(row + t + 1, row + seq_len, T(0));  // causal mask
      }
      // out_h[r0:r1, hd] = probs[r0:r1, 0:r1] @ v[0:r1, hd]
      T* out_h = out + b * seq_len * channels + h * hd;
      const T* pv = product_operand(p, seq_len * seq_len, round, probs_rounded);
      for (int64_t r = 0; r < blocks.count; ++r) {
        const int64_t r0 = blocks.begin(r), r1 = blocks.begin(r + 1);
        gemm<T>(false, false, r1 - r0, hd, r1, T(1), pv + r0 * seq_len, seq_len, v, ld, T(0), out_h + r0 * channels,
                channels);
      }
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int64_t batch, int64_t seq_len,
                        int64_t channels, int64_t n_head, bool bf16_operands) {
  const int64_t hd = channels / n_head, ld = 3 * channels;
  const T scale = static_cast<T>(1) / std::sqrt(static_cast<T>(hd));
  const bool round = bf16_operands && std::is_same_v<T, float>;
  std::vector<T> qkv_rounded, dout_rounded;
  const T* operands = product_operand(qkv, batch * seq_len * ld, round, qkv_rounded);
  const T* dout_operand = product_operand(dout, batch * seq_len * channels, round, dout_rounded);
#pragma omp parallel
  {
    std::vector<T> dscores(static_cast<std::size_t>(seq_len * seq_len)), probs_rounded;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < batch * n_head; ++bh) {
      const int64_t b = bh / n_head, h = bh % n_head;
      const T* q = operands + b * seq_len * ld + h * hd;
      const T* k = q + channels;
      const T* v = q + 2 * channels;
      T* dq = dqkv + b * seq_len * ld + h * hd;
      T* dk = dq + channels;
      T* dv = dq + 2 * channels;
      const T* p = probs + bh * seq_len * seq_len;
      const T* dout_h = dout_operand + b * seq_len * channels + h * hd;
      const T* pv = product_operand(p, seq_len * seq_len, round, probs_rounded);  // as dvalue sees them
      T* ds = dscores.data();
      const CausalBlocks blocks(seq_len);
      for (int64_t r = 0; r < blocks.count; ++r) {
        const int64_t r0 = blocks.begin(r), r1 = blocks.begin(r + 1);
        // dprobs[r0:r1, 0:r1] = dout_h[r0:r1, hd] @ v[0:r1, hd]^T
        gemm<T>(false, true, r1 - r0, r1, hd, T(1), dout_h + r0 * channels, channels, v, ld, T(0),
                ds + r0 * seq_len, seq_len);
        // dv[c0:c1, hd] = probs[c0:T, c0:c1]^T @ dout_h[c0:T, hd] (block r as keys)
        gemm<T>(true, false, r1 - r0, hd, seq_len - r0, T(1), pv + r0 * seq_len + r0, seq_len,
                dout_h + r0 * channels, channels, T(0), dv + r0 * ld, ld);
      }
      // softmax backward: dscores = probs * (dprobs - sum_j probs*dprobs), times the 1/sqrt(hd) scale
      for (int64_t t = 0; t < seq_len; ++t) {
        const T* prow = p + t * seq_len;
        T* drow = ds + t * seq_len;
        T dot = 0;
        for (int64_t j = 0; j <= t; ++j) dot += prow[j] * drow[j];
        for (int64_t j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot) * scale;
        std::fill(drow + t + 1, drow + seq_len, T(0));
      }
      if (round) round_in_place(ds, seq_len * seq_len);  // the operand of dquery and dkey
      for (int64_t r = 0; r < blocks.count; ++r) {
        const int64_t r0 = blocks.begin(r), r1 = blocks.begin(r + 1);
        // dq[r0:r1, hd] = dscores[r0:r1, 0:r1] @ k[0:r1, hd]
        gemm<T>(false, false, r1 - r0, hd, r1, T(1), ds + r0 * seq_len, seq_len, k, ld, T(0), dq + r0 * ld, ld);
        // dk[c0:c1, hd] = dscores[c0:T, c0:c1]^T @ q[c0:T, hd]
        gemm<T>(true, false, r1 - r0, hd, seq_len - r0, T(1), ds + r0 * seq_len + r0, seq_len, q + r0 * ld, ld, T(0),
                dk + r0 * ld, ld);
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t, bool);
template void attention_forward<double>(double*, double*, const double*, int64_t, int64_t, int64_t, int64_t, bool);
template void attention_backward<float>(float*, const float*, const float*, const float*, int64_t, int64_t,
                                        int64_t, int64_t, bool);
template void attention_backward<double>(double*, const double*, const double*, const double*, int64_t,
                                         int64_t, int64_t, int64_t, bool);

}  // namespace tripod::cpu
