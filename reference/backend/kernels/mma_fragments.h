// Where the elements of a warp-wide tensor-core product live: PTX's mma.sync.aligned.m16n8k16 with
// bf16 A and B and fp32 C/D (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"). A warp computes D [16 x 8] = A [16 x 16] B [16 x 8] + C; each of its 32 lanes holds a
// fixed part of every operand in registers. With g = lane / 4 and t = lane % 4:
//   A  four 32-bit registers, each two bf16 of one row (the lower column in the low half):
//      a[0] = row g,     columns 2t, 2t+1       a[1] = row g + 8, columns 2t, 2t+1
//      a[2] = row g,     columns 2t+8, 2t+9     a[3] = row g + 8, columns 2t+8, 2t+9
//   B  two 32-bit registers, each two bf16 of one column (the lower row in the low half):
//      b[0] = rows 2t, 2t+1 of column g         b[1] = rows 2t+8, 2t+9 of column g
//   C, D  four floats: c[0], c[1] = row g, columns 2t, 2t+1; c[2], c[3] = row g + 8, the same.
// So C's two n-tiles of 8 columns side by side hold, lane for lane, what A's registers need for a
// 16-deep product: a flash kernel turns its probabilities into the next product's A operand
// without moving them between lanes (c of tile 2k -> a[0], a[1]; of tile 2k+1 -> a[2], a[3]).
// Pure functions, so the host's emulation of the product (backend/cpu/flash_host_warp.h) and its
// tests use the same map as the kernels.
#pragma once
#include <cstdint>

#include "backend/kernels/host_device.h"

namespace tripod::kernels::mma {

inline constexpr int kWarpLanes = 32;
inline constexpr int kM = 16, kN = 8, kK = 16;  // D [kM x kN] = A [kM x kK] B [kK x kN] + C

struct Place {
  int row, col;
};

TRIPOD_HD int group_of(int lane) { return lane >> 2; }
TRIPOD_HD int thread_in_group(int lane) { return lane & 3; }

// Element e (0 or 1: the low or high half) of A register r (0..3) of `lane`.
TRIPOD_HD Place a_place(int lane, int r, int e) {
  return {group_of(lane) + 8 * (r & 1), 2 * thread_in_group(lane) + e + 8 * (r >> 1)};
}
// Element e of B register r (0..1) of `lane`: {row k, column n}.
TRIPOD_HD Place b_place(int lane, int r, int e) {
  return {2 * thread_in_group(lane) + e + 8 * r, group_of(lane)};
}
// C/D element i (0..3) of `lane`.
TRIPOD_HD Place c_place(int lane, int i) {
  return {group_of(lane) + 8 * (i >> 1), 2 * thread_in_group(lane) + (i & 1)};
}

// The bf16 element e (0: low half, 1: high half) of a packed register.
TRIPOD_HD uint16_t half_of(uint32_t word, int e) { return static_cast<uint16_t>(e == 0 ? word & 0xFFFFu : word >> 16); }

}  // namespace tripod::kernels::mma
