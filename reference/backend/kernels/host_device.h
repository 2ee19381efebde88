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
