// Causal multi-head self-attention on the CPU: one (batch, head) pair per OpenMP iteration, its
// small GEMMs through OpenBLAS (single-threaded inside the parallel loop), softmax by hand.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"

namespace tripod::cpu {

// qkv[B,T,3C]: for head h, q = columns [h*hd, (h+1)*hd), k = C + those, v = 2C + those.
// out[B,T,C] (head h in columns [h*hd, (h+1)*hd)); probs[B,H,T,T] lower-triangular softmax.
template <typename T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t batch, int64_t seq_len, int64_t channels,
                       int64_t n_head) {
  const int64_t hd = channels / n_head, ld = 3 * channels;
  const T scale = static_cast<T>(1) / std::sqrt(static_cast<T>(hd));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < batch * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    const T* q = qkv + b * seq_len * ld + h * hd;
    const T* k = q + channels;
    const T* v = q + 2 * channels;
    T* p = probs + bh * seq_len * seq_len;
    // scores[T,T] = scale * q[T,hd] @ k[T,hd]^T
    gemm<T>(false, true, seq_len, seq_len, hd, scale, q, ld, k, ld, T(0), p, seq_len);
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
    // out_h[T,hd] = probs[T,T] @ v[T,hd]
    gemm<T>(false, false, seq_len, hd, seq_len, T(1), p, seq_len, v, ld, T(0),
            out + b * seq_len * channels + h * hd, channels);
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int64_t batch, int64_t seq_len,
                        int64_t channels, int64_t n_head) {
  const int64_t hd = channels / n_head, ld = 3 * channels;
  const T scale = static_cast<T>(1) / std::sqrt(static_cast<T>(hd));
#pragma omp parallel
  {
    std::vector<T> dscores(static_cast<std::size_t>(seq_len * seq_len));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < batch * n_head; ++bh) {
      const int64_t b = bh / n_head, h = bh % n_head;
      const T* q = qkv + b * seq_len * ld + h * hd;
      const T* k = q + channels;
      const T* v = q + 2 * channels;
      T* dq = dqkv + b * seq_len * ld + h * hd;
      T* dk = dq + channels;
      T* dv = dq + 2 * channels;
      const T* p = probs + bh * seq_len * seq_len;
      const T* dout_h = dout + b * seq_len * channels + h * hd;
      T* ds = dscores.data();
      // dprobs[T,T] = dout_h[T,hd] @ v[T,hd]^T ; dv[T,hd] = probs^T @ dout_h
      gemm<T>(false, true, seq_len, seq_len, hd, T(1), dout_h, channels, v, ld, T(0), ds, seq_len);
      gemm<T>(true, false, seq_len, hd, seq_len, T(1), p, seq_len, dout_h, channels, T(0), dv, ld);
      // softmax backward: dscores = probs * (dprobs - sum_j probs*dprobs), times the 1/sqrt(hd) scale
      for (int64_t t = 0; t < seq_len; ++t) {
        const T* prow = p + t * seq_len;
        T* drow = ds + t * seq_len;
        T dot = 0;
        for (int64_t j = 0; j <= t; ++j) dot += prow[j] * drow[j];
        for (int64_t j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot) * scale;
        std::fill(drow + t + 1, drow + seq_len, T(0));
      }
      // dq = dscores @ k ; dk = dscores^T @ q
      gemm<T>(false, false, seq_len, hd, seq_len, T(1), ds, seq_len, k, ld, T(0), dq, ld);
      gemm<T>(true, false, seq_len, hd, seq_len, T(1), ds, seq_len, q, ld, T(0), dk, ld);
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t);
template void attention_forward<double>(double*, double*, const double*, int64_t, int64_t, int64_t, int64_t);
template void attention_backward<float>(float*, const float*, const float*, const float*, int64_t, int64_t,
                                        int64_t, int64_t);
template void attention_backward<double>(double*, const double*, const double*, const double*, int64_t,
                                         int64_t, int64_t, int64_t);

}  // namespace tripod::cpu
