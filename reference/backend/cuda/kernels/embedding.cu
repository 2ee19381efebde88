// Token and position embeddings, forward and a deterministic backward (no atomics), with the
// arithmetic of backend/kernels/embedding_math.h: the backward adds every element's tokens in
// token order, as the CPU backend does, so its result is bit-identical to the CPU's
// (test_kernel_embedding_math.cpp replays it on the host).
//
// Forward and lookups: a warp per token row (launch_patterns.cuh), lanes over channels: one
// coalesced read of the table row and the position row, one write.
// Backward: the token gradient sorts the token indices by table row (a stable CUB radix sort),
// then the first position of each row's run adds the run's dout rows in token order, a warp over
// the channels (each dwte element has exactly one writer); the position gradient is T * C
// threads, thread (t, c) adding the tokens at position t. Adjacent lanes take adjacent channels,
// so a warp's dout reads are coalesced.
#include <climits>
#include <cstddef>

#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/kernels/embedding.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/cuda/kernels/stream_scratch.cuh"
#include "backend/kernels/embedding_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

// out[n, :] = wte[tokens[n], :] + wpe[n % T, :]; a row whose id lies outside the table stays 0.
template <typename T>
struct EmbeddingForwardRow {
  T* __restrict__ out;
  const int32_t* __restrict__ tokens;
  const T* __restrict__ wte;
  const T* __restrict__ wpe;
  int64_t seq_len, channels, vocab;
  __device__ void operator()(int64_t n, int lane) const {
    T* o = out + n * channels;
    const int64_t row = kernels::embedding_row(tokens[n], 0, vocab);
    if (row < 0) {
      for (int64_t c = lane; c < channels; c += kWarpSize) o[c] = T(0);
      return;
    }
    const T* w = wte + row * channels;
    const T* p = wpe + (n % seq_len) * channels;
    for (int64_t c = lane; c < channels; c += kWarpSize) o[c] = w[c] + p[c];
  }
};

// out[n, :] = this window's row of tokens[n], or 0 for another window's token.
template <typename T>
struct LookupWindowRow {
  T* __restrict__ out;
  const int32_t* __restrict__ tokens;
  const T* __restrict__ wte;
  int64_t channels, start, valid;
  __device__ void operator()(int64_t n, int lane) const {
    T* o = out + n * channels;
    const int64_t row = kernels::embedding_row(tokens[n], start, valid);
    if (row < 0) {
      for (int64_t c = lane; c < channels; c += kWarpSize) o[c] = T(0);
      return;
    }
    const T* w = wte + row * channels;
    for (int64_t c = lane; c < channels; c += kWarpSize) o[c] = w[c];
  }
};

// out[i, :] += wpe[(first_token + i) % T, :].
template <typename T>
struct PositionAddRow {
  T* __restrict__ out;
  const T* __restrict__ wpe;
  int64_t channels, first_token, seq_len;
  __device__ void operator()(int64_t i, int lane) const {
    T* o = out + i * channels;
    const T* p = wpe + ((first_token + i) % seq_len) * channels;
    for (int64_t c = lane; c < channels; c += kWarpSize) o[c] += p[c];
  }
};

// Thread i: token i's sort key (its window row, or `valid`) and its index, the sort's input.
struct TokenSortKeyOp {
  int32_t* __restrict__ keys;
  int32_t* __restrict__ order;
  const int32_t* __restrict__ tokens;
  int64_t start, valid;
  __device__ void operator()(int64_t i) const {
    keys[i] = static_cast<int32_t>(kernels::token_sort_key(tokens[i], start, valid));
    order[i] = static_cast<int32_t>(i);
  }
};

// A warp per position of the sorted tokens: the first position of each row's run adds the run
// (token_run_column over the warp's channels); the rest of the run, and the keys past the window,
// do nothing.
template <typename T>
struct TokenRunRow {
  T* dwte;
  const T* __restrict__ dout;
  const int32_t* __restrict__ keys;   // sorted
  const int32_t* __restrict__ order;  // the token indices, in the keys' order
  int64_t n_tokens, channels, valid;
  __device__ void operator()(int64_t i, int lane) const {
    const int32_t row = keys[i];
    if (row >= valid || (i > 0 && keys[i - 1] == row)) return;
    int32_t run_length = 1;
    while (i + run_length < n_tokens && keys[i + run_length] == row) ++run_length;
    T* dwte_row = dwte + static_cast<int64_t>(row) * channels;
    for (int64_t c = lane; c < channels; c += kWarpSize)
      kernels::token_run_column(dwte_row, dout, order + i, run_length, channels, c);
  }
};

// The token gradient: keys, a stable radix sort of (key, token index) by key (CUB; stable, so each
// row's tokens stay in token order, and deterministic), then a warp per sorted position. A step's
// 8192 tokens are sorted in microseconds, where a thread per (row class, channel) walking every
// token (this backend's first form) took ~1 ms of an H200's step at GPT-2's sizes.
template <typename T>
void token_gradient(T* dwte, const T* dout, const int32_t* tokens, int64_t n_tokens, int64_t channels, int64_t start,
                    int64_t valid, const CudaContext& ctx, const char* op) {
  check(n_tokens < INT32_MAX && valid < INT32_MAX, op, ": ", n_tokens, " tokens and a window of ", valid,
        " rows exceed the token sort's 32-bit keys and indices");
  int end_bit = 1;  // keys are 0 .. valid
  while ((int64_t{1} << end_bit) <= valid) ++end_bit;
  const int n = static_cast<int>(n_tokens);
  StreamScratch sorting(4 * static_cast<std::size_t>(n) * sizeof(int32_t), ctx.stream, op);
  int32_t* keys = sorting.as<int32_t>();
  int32_t *order = keys + n, *sorted_keys = keys + 2 * n, *sorted_order = keys + 3 * n;
  launch_elementwise(TokenSortKeyOp{keys, order, tokens, start, valid}, n_tokens, ctx, op);
  std::size_t temp_bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, sorted_keys, order, sorted_order, n, 0, end_bit,
                                             ctx.stream),
             "embedding backward: the token sort's workspace size");
  StreamScratch temp(temp_bytes > 0 ? temp_bytes : 1, ctx.stream, op);
  check_cuda(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys, sorted_keys, order, sorted_order, n, 0,
                                             end_bit, ctx.stream),
             "embedding backward: the token sort");
  launch_warp_rows(TokenRunRow<T>{dwte, dout, sorted_keys, sorted_order, n_tokens, channels, valid}, n_tokens, ctx,
                   op);
}

// Thread i = t * C + c of the position gradient.
template <typename T>
struct PositionGradOp {
  T* dwpe;
  const T* __restrict__ dout;
  int64_t n_tokens, seq_len, channels;
  __device__ void operator()(int64_t i) const {
    kernels::position_grad_element(dwpe, dout, n_tokens, seq_len, channels, i / channels, i % channels);
  }
};

void check_sizes(const char* op, int64_t n_tokens, int64_t channels, int64_t seq_len) {
  check(n_tokens >= 0 && channels >= 0 && seq_len > 0, op, ": bad sizes (", n_tokens, " tokens, ", channels,
        " channels, sequence length ", seq_len, ")");
}

// dwte (rows [start, start + valid) of the vocabulary) and dwpe [T, C] += dout's tokens.
template <typename T>
void launch_embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                               int64_t seq_len, int64_t channels, int64_t start, int64_t valid,
                               const CudaContext& ctx, const char* op) {
  if (n_tokens == 0 || channels == 0) return;
  if (valid > 0) token_gradient(dwte, dout, tokens, n_tokens, channels, start, valid, ctx, op);
  // Positions beyond the tokens (n_tokens < T) get nothing: their loop is empty.
  launch_elementwise(PositionGradOp<T>{dwpe, dout, n_tokens, seq_len, channels}, seq_len * channels, ctx, op);
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t n_tokens, int64_t seq_len,
                       int64_t channels, int64_t vocab, const CudaContext& ctx) {
  check_sizes("embedding_forward", n_tokens, channels, seq_len);
  if (channels == 0) return;
  launch_warp_rows(EmbeddingForwardRow<T>{out, tokens, wte, wpe, seq_len, channels, vocab}, n_tokens, ctx,
                   "embedding_forward");
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens, int64_t seq_len,
                        int64_t channels, int64_t vocab, const CudaContext& ctx) {
  check_sizes("embedding_backward", n_tokens, channels, seq_len);
  launch_embedding_backward(dwte, dwpe, dout, tokens, n_tokens, seq_len, channels, 0, vocab, ctx,
                            "embedding_backward");
}

template <typename T>
void embedding_lookup_window(T* out, const int32_t* tokens, const T* wte, int64_t n_tokens, int64_t channels,
                             int64_t start, int64_t valid, const CudaContext& ctx) {
  check_sizes("embedding_lookup_window", n_tokens, channels, 1);
  if (channels == 0) return;
  launch_warp_rows(LookupWindowRow<T>{out, tokens, wte, channels, start, valid}, n_tokens, ctx,
                   "embedding_lookup_window");
}

template <typename T>
void position_add(T* out, const T* wpe, int64_t rows, int64_t channels, int64_t first_token, int64_t seq_len,
                  const CudaContext& ctx) {
  check_sizes("position_add", rows, channels, seq_len);
  check(first_token >= 0, "position_add: first token ", first_token, " is negative");
  if (channels == 0) return;
  launch_warp_rows(PositionAddRow<T>{out, wpe, channels, first_token, seq_len}, rows, ctx, "position_add");
}

template <typename T>
void embedding_backward_window(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t n_tokens,
                               int64_t channels, int64_t start, int64_t valid, int64_t seq_len,
                               const CudaContext& ctx) {
  check_sizes("embedding_backward_window", n_tokens, channels, seq_len);
  launch_embedding_backward(dwte, dwpe, dout, tokens, n_tokens, seq_len, channels, start, valid, ctx,
                            "embedding_backward_window");
}

#define TRIPOD_INSTANTIATE(T)                                                                                       \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,   \
                                     const CudaContext&);                                                           \
  template void embedding_backward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t,        \
                                      const CudaContext&);                                                          \
  template void embedding_lookup_window<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int64_t,       \
                                           const CudaContext&);                                                     \
  template void position_add<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, const CudaContext&);             \
  template void embedding_backward_window<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, \
                                             int64_t, const CudaContext&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
