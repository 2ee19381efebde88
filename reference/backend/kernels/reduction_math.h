// The deterministic reductions' geometry and per-thread arithmetic (backend/cuda/kernels/
// reductions.cu), shared with the host test that emulates them (test_kernel_reduction_math.cpp).
//
// Scalar sums (sum of squares, non-finite count, valid-loss sum) run in two passes whose order
// depends only on n: `reduce_blocks(n)` blocks of kReduceThreads threads; thread g of G = blocks *
// kReduceThreads sums elements g, g + G, g + 2G, ... in that order (strided_sum, coalesced: a warp
// reads 32 adjacent elements), each block sums its threads in a fixed tree into one partial, and
// a single block sums the partials in a fixed tree. Everything in fp64 (counts are exact in fp64
// below 2^53).
//
// Column sums over rows (bias and LayerNorm weight gradients): the rows split into chunks of
// kColumnChunkRows; a block per (strip of 32 columns, chunk), lane l of warp w summing the chunk's
// rows w, w + kColumnSumWarps, ... of column strip * 32 + l; the block adds its warps' partials in
// warp order into the chunk's partial, and a second pass adds the chunks' partials in chunk order
// (one chunk: no second pass). The chunks give a GPT-2 layer's [8192, 768] gradient 16 x 24
// blocks instead of 24, on a device of 132 multiprocessors. No atomics anywhere.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/host_device.h"

namespace tripod::kernels {

constexpr int kReduceThreads = 256;      // threads a block in the first pass
constexpr int64_t kMaxReduceBlocks = 1024;  // partials; the second pass is one block of this many threads
constexpr int64_t kReduceItemsPerThread = 8;  // fewer blocks for small n: an idle block costs a launch slot

// Blocks of the first pass for n elements: enough that each thread has ~kReduceItemsPerThread
// elements, at most kMaxReduceBlocks (then each thread loops). Depends on n only, never on the
// device, so a result is the same on every GPU.
TRIPOD_HD int64_t reduce_blocks(int64_t n) {
  const int64_t per_block = kReduceThreads * kReduceItemsPerThread;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return blocks < 1 ? 1 : (blocks > kMaxReduceBlocks ? kMaxReduceBlocks : blocks);
}

// sum over i = first, first + stride, ... < n of term(i), added in that order. Four terms are
// evaluated before they are added, so their loads are in flight together; the additions keep the
// plain loop's order.
template <typename Term>
TRIPOD_HD double strided_sum(const Term& term, int64_t n, int64_t first, int64_t stride) {
  double sum = 0;
  int64_t i = first;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const double a = term(i), b = term(i + stride), c = term(i + 2 * stride), d = term(i + 3 * stride);
    sum += a;
    sum += b;
    sum += c;
    sum += d;
  }
  for (; i < n; i += stride) sum += term(i);
  return sum;
}

// x^2 in fp64 (x widened exactly first), as cpu::sum_squares.
template <typename T>
TRIPOD_HD double square_term(T x) {
  const double d = static_cast<double>(x);
  return d * d;
}

// 1 for an infinity or a NaN (exponent all ones), else 0; by bits, so no fast-math setting can
// fold it away.
TRIPOD_HD double nonfinite_term(float x) { return (float_bits(x) & 0x7F800000u) == 0x7F800000u ? 1.0 : 0.0; }
TRIPOD_HD double nonfinite_term(double x) {
  return (double_bits(x) & 0x7FF0000000000000ull) == 0x7FF0000000000000ull ? 1.0 : 0.0;
}
TRIPOD_HD double nonfinite_bf16_term(uint16_t bits) { return bf16_bits_nonfinite(bits) ? 1.0 : 0.0; }

// The loss of a token whose target is not ignored, else 0 (selected, not multiplied: an ignored
// row's value never reaches the sum, whatever it holds).
template <typename T>
TRIPOD_HD double valid_loss_term(T loss, int32_t target) {
  return target >= 0 ? static_cast<double>(loss) : 0.0;
}

constexpr int kColumnStrip = 32;     // columns a block: one per lane
constexpr int kColumnSumWarps = 16;  // warps a block: each sums every 16th row of the strip's chunk
constexpr int64_t kColumnChunkRows = 512;  // rows a block: 32 for each of its warps

// Row chunks of a column sum over `rows` rows: depends on the rows only, never on the device.
TRIPOD_HD int64_t column_chunks(int64_t rows) {
  const int64_t chunks = (rows + kColumnChunkRows - 1) / kColumnChunkRows;
  return chunks < 1 ? 1 : chunks;
}

}  // namespace tripod::kernels
