// Embedding, LayerNorm and bias kernels. Row-parallel work runs over rows; reductions over
// rows (weight and bias gradients) run over column blocks, each summing rows in order, so the
// result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/bf16.h"
#include "core/error.h"

namespace tripod::cpu {
namespace {
constexpr int64_t kColumnBlock = 64;
}

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t n_tokens,
                       int64_t seq_len, int64_t channels, int64_t vocab) {
  for (int64_t n = 0; n < n_tokens; ++n)
    check(tokens[n] >= 0 && tokens[n] < vocab, "token id ", tokens[n], " at position ", n,
          " is outside the model's vocabulary of ", vocab);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < n_tokens; ++n) {
    const T* w = wte + static_cast<int64_t>(tokens[n]) * channels;
    const T* p = wpe + (n % seq_len) * channels;
    T* o = out + n * channels;
    for (int64_t c = 0; c < channels; ++c) o[c] = w[c] + p[c];
  }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                        int64_t seq_len, int64_t channels) {
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < channels; c0 += kColumnBlock) {
    int64_t c1 = std::min(channels, c0 + kColumnBlock);
    for (int64_t n = 0; n < n_tokens; ++n) {
      const T* d = dout + n * channels;
      T* w = dwte + static_cast<int64_t>(tokens[n]) * channels;
      T* p = dwpe + (n % seq_len) * channels;
      for (int64_t c = c0; c < c1; ++c) {
        w[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

namespace {

// An output element as stored: T itself, or rounded to bf16 as convert rounds (core/bf16.h).
template <typename O, typename T>
O stored_as(T v) {
  if constexpr (std::is_same_v<O, bf16>) return float_to_bf16(v);
  else return v;
}

// Each row's mean and rstd in T, its normalised output stored as O (T, or bf16 for a GEMM operand:
// the same expression, then the rounding convert would apply to it).
template <typename T, typename O>
void layernorm_rows(O* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t rows,
                    int64_t channels, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = inp + r * channels;
    T m = 0;
    for (int64_t c = 0; c < channels; ++c) m += x[c];
    m /= static_cast<T>(channels);
    T var = 0;
    for (int64_t c = 0; c < channels; ++c) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<T>(channels);
    T s = static_cast<T>(1) / std::sqrt(var + static_cast<T>(eps));
    O* o = out + r * channels;
    for (int64_t c = 0; c < channels; ++c) o[c] = stored_as<O>((x[c] - m) * s * weight[c] + bias[c]);
    mean[r] = m;
    rstd[r] = s;
  }
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t rows, int64_t channels, double eps) {
  layernorm_rows(out, mean, rstd, inp, weight, bias, rows, channels, eps);
}

void layernorm_forward_to_bf16(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                               const float* bias, int64_t rows, int64_t channels, double eps) {
  layernorm_rows(out, mean, rstd, inp, weight, bias, rows, channels, eps);
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t rows, int64_t channels) {
  // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), with dnorm = dout * weight.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = inp + r * channels;
    const T* d = dout + r * channels;
    T m = mean[r], s = rstd[r];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t c = 0; c < channels; ++c) {
      T dnorm = d[c] * weight[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= static_cast<T>(channels);
    dnorm_norm_mean /= static_cast<T>(channels);
    T* dx = dinp + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      T norm = (x[c] - m) * s;
      dx[c] += (d[c] * weight[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < channels; c0 += kColumnBlock) {
    int64_t c1 = std::min(channels, c0 + kColumnBlock);
    for (int64_t r = 0; r < rows; ++r) {
      const T* x = inp + r * channels;
      const T* d = dout + r * channels;
      for (int64_t c = c0; c < c1; ++c) {
        dbias[c] += d[c];
        dweight[c] += d[c] * (x[c] - mean[r]) * rstd[r];
      }
    }
  }
}

template <typename T>
void bias_add(T* out, const T* bias, int64_t rows, int64_t channels) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) out[r * channels + c] += bias[c];
}

template <typename T>
void bias_grad(T* dbias, const T* dout, int64_t rows, int64_t channels) {
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < channels; c0 += kColumnBlock) {
    int64_t c1 = std::min(channels, c0 + kColumnBlock);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) dbias[c] += dout[r * channels + c];
  }
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  constexpr int64_t kBlock = 4096;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    // Eight interleaved accumulators break the add-latency chain and vectorise, in a fixed order.
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t begin = b * kBlock, end = std::min(n, (b + 1) * kBlock);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8)
      for (int l = 0; l < 8; ++l) lanes[l] += static_cast<double>(x[i + l]) * x[i + l];
    for (; i < end; ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
    double s = 0;
    for (double lane : lanes) s += lane;
    partial[static_cast<std::size_t>(b)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

#define TRIPOD_INSTANTIATE(T)                                                                              \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t,    \
                                     int64_t);                                                             \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t);        \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double);  \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,        \
                                      int64_t, int64_t);                                                   \
  template void bias_add<T>(T*, const T*, int64_t, int64_t);                                               \
  template void bias_grad<T>(T*, const T*, int64_t, int64_t);                                              \
  template double sum_squares<T>(const T*, int64_t);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cpu
