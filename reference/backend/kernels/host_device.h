// Functions compiled for both the host and a CUDA device. Each kernel's per-element or per-row
// arithmetic is written once, in a header of this folder, and called by the CUDA kernel on the
// device and by a plain host loop in the unit tests, so the device's arithmetic is checked against
// the CPU backend on a machine without a GPU (suites/unit/test_kernel_*.cpp).
#pragma once

#if defined(__CUDACC__)
#define TRIPOD_HD __host__ __device__ __forceinline__
#else
#define TRIPOD_HD inline
#endif

// Unrolls the next loop in device code (a loop over a register array must be unrolled, or the
// array goes to local memory); nothing on the host.
#if defined(__CUDA_ARCH__)
#define TRIPOD_UNROLL _Pragma("unroll")
#else
#define TRIPOD_UNROLL
#endif

namespace tripod::kernels {

// a * b rounded on its own on the device. There nvcc's default --fmad=true may
// fuse a product into an add that follows it (one fma, rounded once), so the bits would depend on
// the code around the product: in a * x + b * y one product becomes an fma and the other does not
// (the result then depends on the operands' order), and a fused kernel that stores a product and
// also sums it would sum another value than the separate kernels it replaces. On the host every
// product is rounded on its own: the project builds with -ffp-contract=off (CMakeLists.txt).
template <typename T>
TRIPOD_HD T unfused_product(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == sizeof(double)) {
    return __dmul_rn(a, b);
  } else {
    return __fmul_rn(a, b);
  }
#else
  return a * b;
#endif
}

}  // namespace tripod::kernels
