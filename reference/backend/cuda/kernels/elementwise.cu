// Elementwise kernels: a thread per element (launch_patterns.cuh), the arithmetic of
// backend/kernels/elementwise_math.h and bf16_math.h (checked on the host against the CPU backend
// by test_kernel_elementwise_math.cpp). Each reads and writes every element once, coalesced.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/launch_patterns.cuh"
#include "backend/kernels/bf16_math.h"
#include "backend/kernels/elementwise_math.h"
#include "backend/kernels/row_reduce_math.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

// ---- element operations ----

template <typename T>
struct FillOp {
  T* x;
  T value;
  __device__ void operator()(int64_t i) const { x[i] = value; }
  __device__ void quad(int64_t g) const { store4(x, g, make_float4(value, value, value, value)); }
};

// One element in To's type, core/bf16.h's rules (bf16_math.h): fp32 <-> fp64 is a C++ conversion
// (round to nearest even, widening exact) on the device as on the host.
template <typename From, typename To>
__device__ __forceinline__ To convert_element(From x) {
  if constexpr (std::is_same_v<To, bf16>) {
    To out;
    if constexpr (std::is_same_v<From, double>) out.bits = kernels::double_to_bf16_bits(x);
    else out.bits = kernels::float_to_bf16_bits(x);
    return out;
  } else if constexpr (std::is_same_v<From, bf16>) {
    return static_cast<To>(kernels::bf16_bits_to_float(x.bits));  // exact in fp32 and fp64
  } else {
    return static_cast<To>(x);
  }
}

template <typename From, typename To>
struct ConvertOp {
  const From* src;
  To* dst;
  __device__ void operator()(int64_t i) const { dst[i] = convert_element<From, To>(src[i]); }
};

// fp32 -> bf16 four elements a thread: one 16-byte load, one 8-byte store (a thread per element
// moved 4 + 2 bytes an access). Group g is elements [4g, 4g + 4); the last group may be partial.
// The values are convert_element's, so the result is the same bit for bit. Needs src 16-byte and
// dst 8-byte aligned (convert checks it and takes ConvertOp otherwise).
struct ConvertFloatToBf16x4Op {
  const float* src;
  bf16* dst;
  int64_t n;
  __device__ void operator()(int64_t g) const {
    const int64_t i = 4 * g;
    if (i + 4 <= n) {
      store4(dst, g, load4(src, g));
    } else {
      for (int64_t j = i; j < n; ++j) dst[j] = convert_element<float, bf16>(src[j]);
    }
  }
};

// A warp per row of dst (launch_warp_rows): no index division per element. Each lane loads four
// elements (a warp's four coalesced 128-element spans) before it stores any: the rows of the LM
// head's padded copies are unaligned on one side, so no wider access applies, and a load after a
// store it might alias would otherwise wait for it (measured ~2.3 TB/s on the H200, against a
// copy's 4).
template <typename From, typename To>
struct Convert2dOp {
  const From* __restrict__ src;
  int64_t ld_src, rows, cols;
  To* __restrict__ dst;
  int64_t ld_dst, cols_dst;
  __device__ void operator()(int64_t row, int lane) const {
    constexpr int kInFlight = 4;
    const From* in = src + row * ld_src;
    To* out = dst + row * ld_dst;
    const int64_t inside = row < rows ? cols : 0;
    for (int64_t base = lane; base < cols_dst; base += kInFlight * kWarpSize) {
      To v[kInFlight];
      TRIPOD_UNROLL
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t c = base + u * kWarpSize;
        v[u] = c < inside ? convert_element<From, To>(in[c]) : convert_element<float, To>(0.0f);
      }
      TRIPOD_UNROLL
      for (int u = 0; u < kInFlight; ++u)
        if (base + u * kWarpSize < cols_dst) out[base + u * kWarpSize] = v[u];
    }
  }
};

// The ops below run four elements a thread for fp32 (launch_patterns.cuh's FourElementGroups):
// quad(g) applies the same scalar expression to each of group g's elements.

template <typename T>
struct AddOp {
  T* out;  // may alias a or b: each element is read before it is written, by the same thread
  const T* a;
  const T* b;
  __device__ void operator()(int64_t i) const { out[i] = a[i] + b[i]; }
  __device__ void quad(int64_t g) const {
    const float4 x = load4(a, g), y = load4(b, g);
    store4(out, g, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
  }
};

template <typename T>
struct ScaleOp {
  T* x;
  T factor;
  __device__ void operator()(int64_t i) const { x[i] *= factor; }
  __device__ void quad(int64_t g) const {
    const float4 v = load4(x, g);
    store4(x, g, make_float4(v.x * factor, v.y * factor, v.z * factor, v.w * factor));
  }
};

// The GELU ops read In (and DOut) = T, or bf16 for an fp32 T (bf16-mixed's pre-activation and
// gradient of gelu(fc), their values widened exactly by kernels::widened: the bits of the fp32
// inputs they stand for).
template <typename T, typename In = T>
struct GeluForwardOp {
  T* __restrict__ out;
  const In* __restrict__ inp;
  __device__ void operator()(int64_t i) const { out[i] = kernels::gelu_forward_value(kernels::widened(inp[i])); }
  __device__ void quad(int64_t g) const {
    const float4 x = load4(inp, g);
    store4(out, g,
           make_float4(kernels::gelu_forward_value(x.x), kernels::gelu_forward_value(x.y),
                       kernels::gelu_forward_value(x.z), kernels::gelu_forward_value(x.w)));
  }
};

// bf16(gelu(x)) straight from x: the MLP's c_proj operand under bf16-mixed without the fp32
// gelu(x) (Backend::gelu_operand). GeluForwardOp's values rounded as convert_element rounds them,
// so the bits of gelu_forward then convert. Four elements a thread (FourElementGroups) where x
// and out allow the wide accesses (one 16- or 8-byte load, one 8-byte store), else one.
template <typename In>
struct GeluToBf16Op {
  bf16* __restrict__ out;
  const In* __restrict__ inp;
  __device__ void operator()(int64_t i) const {
    out[i] = convert_element<float, bf16>(kernels::gelu_forward_value(kernels::widened(inp[i])));
  }
  __device__ void quad(int64_t g) const {
    const float4 x = load4(inp, g);
    store4(out, g,
           make_float4(kernels::gelu_forward_value(x.x), kernels::gelu_forward_value(x.y),
                       kernels::gelu_forward_value(x.z), kernels::gelu_forward_value(x.w)));
  }
};

template <typename T, typename In = T, typename DOut = T>
struct GeluBackwardOp {
  T* __restrict__ dinp;
  const In* __restrict__ inp;
  const DOut* __restrict__ dout;
  __device__ void operator()(int64_t i) const {
    dinp[i] = kernels::gelu_backward_value(static_cast<T>(kernels::widened(inp[i])),
                                           static_cast<T>(kernels::widened(dout[i])));
  }
  __device__ void quad(int64_t g) const {
    const float4 x = load4(inp, g), dy = load4(dout, g);
    store4(dinp, g,
           make_float4(kernels::gelu_backward_value(x.x, dy.x), kernels::gelu_backward_value(x.y, dy.y),
                       kernels::gelu_backward_value(x.z, dy.z), kernels::gelu_backward_value(x.w, dy.w)));
  }
};

// A wide load of an input: 16 bytes for four fp32 elements, 8 for four bf16 ones.
template <typename In>
constexpr std::size_t quad_bytes() {
  return 4 * sizeof(In);
}

template <typename T>
struct AdamWOp {
  T* __restrict__ param;
  const T* __restrict__ grad;
  T* __restrict__ m;
  T* __restrict__ v;
  kernels::AdamWCoefficients<T> k;
  __device__ void operator()(int64_t i) const {
    T p = param[i], mi = m[i], vi = v[i];
    kernels::adamw_element(p, grad[i], mi, vi, k);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
};

// AdamWOp on elements [2g, 2g + 2) with 8-byte loads and stores (the last pair may be one element).
struct AdamWPairs {
  AdamWOp<float> op;
  int64_t n;
  __device__ void operator()(int64_t g) const {
    if (2 * g + 2 > n) return op(2 * g);
    const float2 p2 = reinterpret_cast<const float2*>(op.param)[g], g2 = reinterpret_cast<const float2*>(op.grad)[g];
    const float2 m2 = reinterpret_cast<const float2*>(op.m)[g], v2 = reinterpret_cast<const float2*>(op.v)[g];
    float p0 = p2.x, p1 = p2.y, m0 = m2.x, m1 = m2.y, v0 = v2.x, v1 = v2.y;
    kernels::adamw_element(p0, g2.x, m0, v0, op.k);
    kernels::adamw_element(p1, g2.y, m1, v1, op.k);
    reinterpret_cast<float2*>(op.param)[g] = make_float2(p0, p1);
    reinterpret_cast<float2*>(op.m)[g] = make_float2(m0, m1);
    reinterpret_cast<float2*>(op.v)[g] = make_float2(v0, v1);
  }
};

// out[r, c] += bias[c], a warp per row (no 64-bit division per element to find c).
template <typename T>
struct BiasAddRow {
  T* __restrict__ out;
  const T* __restrict__ bias;
  int64_t channels;
  __device__ void operator()(int64_t row, int lane) const {
    T* o = out + row * channels;
    for (int64_t c = lane; c < channels; c += kWarpSize) o[c] += bias[c];
  }
};

// A warp per packed row: packed[r, :] = table[ids[r], :], or table[ids[r], :] += packed[r, :]. The
// ids are distinct for the addition, so no two warps write one element.
template <typename T, bool kAdd>
struct IndexedRow {
  T* __restrict__ to;
  const T* __restrict__ from;
  const int32_t* __restrict__ ids;
  int64_t channels;
  __device__ void operator()(int64_t row, int lane) const {
    const int64_t table_row = ids[row];
    if constexpr (kAdd) {
      T* t = to + table_row * channels;
      const T* p = from + row * channels;
      for (int64_t c = lane; c < channels; c += kWarpSize) t[c] += p[c];
    } else {
      T* p = to + row * channels;
      const T* t = from + table_row * channels;
      for (int64_t c = lane; c < channels; c += kWarpSize) p[c] = t[c];
    }
  }
};

void check_size(int64_t n, const char* op) { check(n >= 0, op, ": negative element count ", n); }

}  // namespace

// ---- launchers ----

template <typename T>
void fill(T* x, int64_t n, double value, const CudaContext& ctx) {
  check_size(n, "fill");
  T v;
  if constexpr (std::is_same_v<T, bf16>) v.bits = kernels::double_to_bf16_bits(value);  // one rounding, as convert
  else v = static_cast<T>(value);
  launch_elementwise_in_fours<T>(FillOp<T>{x, v}, n, {x}, ctx, "fill");
}

template <typename From, typename To>
void convert(const From* src, To* dst, int64_t n, const CudaContext& ctx) {
  check_size(n, "convert");
  if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bf16>) {
    // The bf16 copies of GEMM operands under bf16-mixed: most of a step's conversions.
    if (aligned_to(src, 16) && aligned_to(dst, 8)) {
      launch_elementwise(ConvertFloatToBf16x4Op{src, dst, n}, (n + 3) / 4, ctx, "convert (x4)");
      return;
    }
  }
  launch_elementwise(ConvertOp<From, To>{src, dst}, n, ctx, "convert");
}

template <typename From, typename To>
void convert_2d(const From* src, int64_t ld_src, int64_t rows, int64_t cols, To* dst, int64_t ld_dst,
                int64_t rows_dst, int64_t cols_dst, const CudaContext& ctx) {
  check(rows >= 0 && cols >= 0 && ld_src >= cols && rows_dst >= rows && cols_dst >= cols && ld_dst >= cols_dst,
        "convert_2d: [", rows, ", ", cols, "] (leading dimension ", ld_src, ") into [", rows_dst, ", ", cols_dst,
        "] (leading dimension ", ld_dst, ")");
  if (cols_dst == 0) return;
  launch_warp_rows(Convert2dOp<From, To>{src, ld_src, rows, cols, dst, ld_dst, cols_dst}, rows_dst, ctx,
                   "convert_2d");
}

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n, const CudaContext& ctx) {
  check_size(n, "add");
  launch_elementwise_in_fours<T>(AddOp<T>{out, a, b}, n, {out, a, b}, ctx, "add");
}

template <typename T>
void scale(T* x, int64_t n, double factor, const CudaContext& ctx) {
  check_size(n, "scale");
  launch_elementwise_in_fours<T>(ScaleOp<T>{x, static_cast<T>(factor)}, n, {x}, ctx, "scale");
}

template <typename T>
void gather_rows(T* packed, const T* table, const int32_t* ids, int64_t rows, int64_t channels, const CudaContext& ctx) {
  check(rows >= 0 && channels >= 0, "gather_rows: bad shape [", rows, ", ", channels, "]");
  launch_warp_rows(IndexedRow<T, false>{packed, table, ids, channels}, rows, ctx, "gather_rows");
}

template <typename T>
void scatter_add_rows(T* table, const T* packed, const int32_t* ids, int64_t rows, int64_t channels,
                      const CudaContext& ctx) {
  check(rows >= 0 && channels >= 0, "scatter_add_rows: bad shape [", rows, ", ", channels, "]");
  launch_warp_rows(IndexedRow<T, true>{table, packed, ids, channels}, rows, ctx, "scatter_add_rows");
}

template <typename T>
void bias_add(T* out, const T* bias, int64_t rows, int64_t channels, const CudaContext& ctx) {
  check(rows >= 0 && channels >= 0, "bias_add: bad shape [", rows, ", ", channels, "]");
  if (channels == 0) return;
  launch_warp_rows(BiasAddRow<T>{out, bias, channels}, rows, ctx, "bias_add");
}

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, const CudaContext& ctx) {
  check_size(n, "gelu_forward");
  launch_elementwise_in_fours<T>(GeluForwardOp<T>{out, inp}, n, {out, inp}, ctx, "gelu_forward");
}

void gelu_forward(float* out, const bf16* inp, int64_t n, const CudaContext& ctx) {
  check_size(n, "gelu_forward");
  launch_elementwise_in_fours_if(aligned_to(out, 16) && aligned_to(inp, quad_bytes<bf16>()),
                                 GeluForwardOp<float, bf16>{out, inp}, n, ctx, "gelu_forward (bf16 in)");
}

template <typename In>
void gelu_to_bf16(bf16* out, const In* inp, int64_t n, const CudaContext& ctx) {
  check_size(n, "gelu_to_bf16");
  launch_elementwise_in_fours_if(aligned_to(inp, quad_bytes<In>()) && aligned_to(out, 8), GeluToBf16Op<In>{out, inp},
                                 n, ctx, "gelu_to_bf16");
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, const CudaContext& ctx) {
  check_size(n, "gelu_backward");
  launch_elementwise_in_fours<T>(GeluBackwardOp<T>{dinp, inp, dout}, n, {dinp, inp, dout}, ctx, "gelu_backward");
}

template <typename DOut>
void gelu_backward_of_bf16(float* dinp, const bf16* inp, const DOut* dout, int64_t n, const CudaContext& ctx) {
  check_size(n, "gelu_backward");
  launch_elementwise_in_fours_if(
      aligned_to(dinp, 16) && aligned_to(inp, quad_bytes<bf16>()) && aligned_to(dout, quad_bytes<DOut>()),
      GeluBackwardOp<float, bf16, DOut>{dinp, inp, dout}, n, ctx, "gelu_backward (bf16 in)");
}

void gelu_backward(float* dinp, const bf16* inp, const float* dout, int64_t n, const CudaContext& ctx) {
  gelu_backward_of_bf16(dinp, inp, dout, n, ctx);
}

void gelu_backward(float* dinp, const bf16* inp, const bf16* dout, int64_t n, const CudaContext& ctx) {
  gelu_backward_of_bf16(dinp, inp, dout, n, ctx);
}

template <typename T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1, double beta2, double eps,
           double weight_decay, int64_t step, double grad_scale, const CudaContext& ctx) {
  check_size(n, "adamw");
  check(step >= 1, "adamw: step ", step, " (counts from 1, for the bias correction)");
  const auto k = kernels::adamw_coefficients<T>(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  // fp32: two elements a thread (8-byte accesses) where aligned; four a thread kept four correctly
  // rounded divisions' and square roots' slow paths live at once, which ptxas spilled.
  if constexpr (std::is_same_v<T, float>) {
    if (aligned_to(param, 8) && aligned_to(grad, 8) && aligned_to(m, 8) && aligned_to(v, 8)) {
      launch_elementwise(AdamWPairs{AdamWOp<float>{param, grad, m, v, k}, n}, (n + 1) / 2, ctx, "adamw (x2)");
      return;
    }
  }
  launch_elementwise(AdamWOp<T>{param, grad, m, v, k}, n, ctx, "adamw");
}

// ---- instantiations ----

template void fill<float>(float*, int64_t, double, const CudaContext&);
template void fill<double>(double*, int64_t, double, const CudaContext&);
template void fill<bf16>(bf16*, int64_t, double, const CudaContext&);

#define TRIPOD_CONVERT(From, To) template void convert<From, To>(const From*, To*, int64_t, const CudaContext&);
TRIPOD_CONVERT(float, double)
TRIPOD_CONVERT(double, float)
TRIPOD_CONVERT(float, bf16)
TRIPOD_CONVERT(double, bf16)
TRIPOD_CONVERT(bf16, float)
TRIPOD_CONVERT(bf16, double)
#undef TRIPOD_CONVERT
template void gelu_to_bf16<float>(bf16*, const float*, int64_t, const CudaContext&);
template void gelu_to_bf16<bf16>(bf16*, const bf16*, int64_t, const CudaContext&);
template void convert_2d<float, bf16>(const float*, int64_t, int64_t, int64_t, bf16*, int64_t, int64_t, int64_t,
                                      const CudaContext&);
template void convert_2d<float, float>(const float*, int64_t, int64_t, int64_t, float*, int64_t, int64_t, int64_t,
                                       const CudaContext&);

#define TRIPOD_INSTANTIATE(T)                                                                                   \
  template void add<T>(T*, const T*, const T*, int64_t, const CudaContext&);                                   \
  template void scale<T>(T*, int64_t, double, const CudaContext&);                                             \
  template void bias_add<T>(T*, const T*, int64_t, int64_t, const CudaContext&);                              \
  template void gather_rows<T>(T*, const T*, const int32_t*, int64_t, int64_t, const CudaContext&);            \
  template void scatter_add_rows<T>(T*, const T*, const int32_t*, int64_t, int64_t, const CudaContext&);       \
  template void gelu_forward<T>(T*, const T*, int64_t, const CudaContext&);                                    \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, const CudaContext&);                         \
  template void adamw<T>(T*, const T*, T*, T*, int64_t, double, double, double, double, double, int64_t, double, \
                         const CudaContext&);
TRIPOD_INSTANTIATE(float)
TRIPOD_INSTANTIATE(double)
#undef TRIPOD_INSTANTIATE

}  // namespace tripod::cuda
