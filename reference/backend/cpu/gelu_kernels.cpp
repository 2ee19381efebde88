// GELU (tanh approximation, GPT-2's "gelu_new"). This file is compiled with -ffast-math (see
// reference/CMakeLists.txt) so that the tanh calls vectorise through glibc's libmvec: the loops are
// elementwise, with no reductions to reorder, and libmvec's tanh is accurate to a few ulp, which is
// inside the fp32 and fp64 tolerances against PyTorch. Nothing here tests for NaN or infinity (a
// diverged run is caught on the loss, which is computed outside this file).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/kernels/row_reduce_math.h"

namespace tripod::cpu {

namespace {
template <typename T>
constexpr T kGeluScale = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
}

// The elementwise bodies over one contiguous chunk; __restrict and a plain loop let GCC vectorise
// them (inside OpenMP's outlined function it cannot prove the pointers do not alias).
template <typename T>
void gelu_forward_chunk(T* __restrict out, const T* __restrict inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T cube = static_cast<T>(0.044715) * x * x * x;
    out[i] = static_cast<T>(0.5) * x * (static_cast<T>(1) + std::tanh(kGeluScale<T> * (x + cube)));
  }
}

template <typename T>
void gelu_backward_chunk(T* __restrict dinp, const T* __restrict inp, const T* __restrict dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T cube = static_cast<T>(0.044715) * x * x * x;
    const T th = std::tanh(kGeluScale<T> * (x + cube));
    const T sech2 = static_cast<T>(1) - th * th;
    const T darg = kGeluScale<T> * (static_cast<T>(1) + static_cast<T>(3 * 0.044715) * x * x);
    const T grad = static_cast<T>(0.5) * (static_cast<T>(1) + th) + static_cast<T>(0.5) * x * sech2 * darg;
    dinp[i] = grad * dout[i];
  }
}

constexpr int64_t kChunk = 4096;

// A chunk's input as T: inp itself, or (bf16-mixed's bf16 pre-activation or gradient of gelu(fc),
// for an fp32 T) its values widened exactly into `buffer`, so that the chunk bodies above run on
// the fp32 values the bf16 ones stand for: the same code, so the same bits (this file's
// -ffast-math could otherwise vectorise a bf16 loop differently from the fp32 one, libmvec's tanh
// for one, glibc's for the other).
template <typename T>
const T* chunk_input(const T* inp, int64_t, T*) {
  return inp;
}
const float* chunk_input(const bf16* inp, int64_t m, float* buffer) {
  for (int64_t i = 0; i < m; ++i) buffer[i] = kernels::widened(inp[i]);
  return buffer;
}

template <typename T, typename In>
void gelu_forward(T* out, const In* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    T buffer[std::is_same_v<T, In> ? 1 : kChunk];
    const int64_t m = std::min(kChunk, n - c);
    gelu_forward_chunk(out + c, chunk_input(inp + c, m, buffer), m);
  }
}

template <typename T, typename In, typename DOut>
void gelu_backward(T* dinp, const In* inp, const DOut* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    T inp_buffer[std::is_same_v<T, In> ? 1 : kChunk], dout_buffer[std::is_same_v<T, DOut> ? 1 : kChunk];
    const int64_t m = std::min(kChunk, n - c);
    gelu_backward_chunk(dinp + c, chunk_input(inp + c, m, inp_buffer), chunk_input(dout + c, m, dout_buffer), m);
  }
}

// Chunk by chunk through a buffer on the stack: gelu_forward's chunk body, then convert's rounding
// (round_to_bf16, in a file without -ffast-math, so NaN and infinity round as convert rounds them).
template <typename In>
void gelu_forward_to_bf16(bf16* out, const In* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    float widened[std::is_same_v<In, float> ? 1 : kChunk], buffer[kChunk];
    const int64_t m = std::min(kChunk, n - c);
    gelu_forward_chunk(buffer, chunk_input(inp + c, m, widened), m);
    round_to_bf16(buffer, out + c, m);
  }
}

template void gelu_forward<float, float>(float*, const float*, int64_t);
template void gelu_forward<float, bf16>(float*, const bf16*, int64_t);
template void gelu_forward<double, double>(double*, const double*, int64_t);
template void gelu_backward<float, float, float>(float*, const float*, const float*, int64_t);
template void gelu_backward<float, bf16, float>(float*, const bf16*, const float*, int64_t);
template void gelu_backward<float, bf16, bf16>(float*, const bf16*, const bf16*, int64_t);
template void gelu_backward<double, double, double>(double*, const double*, const double*, int64_t);
template void gelu_forward_to_bf16<float>(bf16*, const float*, int64_t);
template void gelu_forward_to_bf16<bf16>(bf16*, const bf16*, int64_t);

}  // namespace tripod::cpu
