// The host executor of backend/kernels/flash_forward_warp.h: one call runs all 32 lanes of a warp
// in lockstep, so a [kLanes][N] array is the warp's registers. The tensor-core product gathers A
// and B from the lanes' fragments by the map of mma_fragments.h, multiplies in fp32 in k's order
// (bf16 products are exact in fp32) and scatters D back; the quad shuffles add in the order the
// device's two butterfly steps do. Used by the emulated device's flash-mma kernels
// (flash_attention_host.cpp) and by suites/unit/test_flash_forward_warp.cpp.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/mma_fragments.h"

namespace tripod::cpu {

struct FlashHostWarp {
  static constexpr int kLanes = kernels::mma::kWarpLanes;
  int lane(int i) const { return i; }

  // D = A B + C for one m16n8k16 product: C/D the 4 floats at c0 of every lane's c, A the 4
  // registers at a0 of every lane's a, B every lane's 2 registers.
  template <int NC, int NA>
  void mma(float (&c)[kLanes][NC], int c0, const uint32_t (&a)[kLanes][NA], int a0,
           const uint32_t (&b)[kLanes][2]) const {
    namespace mma = kernels::mma;
    float am[mma::kM][mma::kK], bm[mma::kK][mma::kN];
    for (int lane = 0; lane < kLanes; ++lane) {
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 2; ++e) {
          const mma::Place at = mma::a_place(lane, r, e);
          am[at.row][at.col] = kernels::bf16_bits_to_float(mma::half_of(a[lane][a0 + r], e));
        }
      for (int r = 0; r < 2; ++r)
        for (int e = 0; e < 2; ++e) {
          const mma::Place at = mma::b_place(lane, r, e);
          bm[at.row][at.col] = kernels::bf16_bits_to_float(mma::half_of(b[lane][r], e));
        }
    }
    for (int lane = 0; lane < kLanes; ++lane)
      for (int i = 0; i < 4; ++i) {
        const mma::Place at = mma::c_place(lane, i);
        float sum = c[lane][c0 + i];
        for (int k = 0; k < mma::kK; ++k) sum += am[at.row][k] * bm[k][at.col];
        c[lane][c0 + i] = sum;
      }
  }

  // x[lane][k] = the max over the lane's group of four (lanes 4g .. 4g + 3).
  template <int N>
  void quad_max(float (&x)[kLanes][N], int k) const {
    butterfly(x, k, [](float a, float b) { return b > a ? b : a; });
  }
  // x[lane][k] = the sum over the lane's group of four, as the device adds: (x + x^1) + (x + x^1)^2.
  template <int N>
  void quad_sum(float (&x)[kLanes][N], int k) const {
    butterfly(x, k, [](float a, float b) { return a + b; }, {1, 2});
  }
  // x[lane][k] = the sum over the 8 lanes of the lane's place in its group (lanes t, t + 4, ...,
  // t + 28: a C fragment's column over its 8 row groups), as the device adds: butterfly steps 4, 8, 16.
  template <int N>
  void column_sum(float (&x)[kLanes][N], int k) const {
    butterfly(x, k, [](float a, float b) { return a + b; }, {4, 8, 16});
  }

 private:
  // The device's steps v = op(v, shfl_xor(v, mask)) for each mask in turn, every lane at once.
  template <int N, class Op>
  static void butterfly(float (&x)[kLanes][N], int k, const Op& op, std::initializer_list<int> masks = {1, 2}) {
    for (int mask : masks) {
      float before[kLanes];
      for (int lane = 0; lane < kLanes; ++lane) before[lane] = x[lane][k];
      for (int lane = 0; lane < kLanes; ++lane) x[lane][k] = op(before[lane], before[lane ^ mask]);
    }
  }
};

}  // namespace tripod::cpu
