// The host executor of backend/kernels/flash_attention_block.h's block algorithms: one loop runs
// every thread's share of a phase in turn, ascending or (the race check) descending (no phase
// reads what another thread writes in it, so either is the device's result), and a tile product is a plain loop over the bf16 operands in the
// block's shared-memory layout (products of bf16 values are exact in fp32; summed in fp32, in k's
// order, where the device's tensor cores sum in their own). Used by the emulated device's flash
// attention (flash_attention_host.cpp) and by suites/unit/test_flash_attention_block.cpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/kernels/bf16_math.h"
#include "backend/kernels/flash_attention_block.h"
#include "core/error.h"

namespace tripod::cpu {

struct FlashHostBlock {
  bool descending = false;  // the replay test's race check: every phase's threads in reverse
  int thread_begin() const { return descending ? kernels::flash::kThreads - 1 : 0; }
  int thread_end() const { return descending ? -1 : kernels::flash::kThreads; }
  int warp_begin() const { return descending ? kernels::flash::kWarps - 1 : 0; }
  int warp_end() const { return descending ? -1 : kernels::flash::kWarps; }
  int step() const { return descending ? -1 : 1; }
  void sync() const {}
  // c [16][16] (ldc) = (accumulate ? c : 0) + op(a) [16, k] op(b) [k, 16]; op(a)(i, kk) is
  // a[i*lda + kk], or a[kk*lda + i] transposed; op(b)(kk, j) is b[kk*ldb + j], or b[j*ldb + kk].
  // The device's tensor-core loads and stores (wmma::load_matrix_sync, store_matrix_sync) need each
  // tile pointer 32-byte aligned and leading dimensions of whole 16 bytes, and the products run 16
  // deep at a time: a layout that breaks one of these fails here, on the host, with the operands'
  // offsets, instead of faulting or reading the wrong elements on a GPU.
  template <bool kATransposed, bool kBTransposed>
  void product(float* c, int ldc, bool accumulate, const bf16* a, int lda, const bf16* b, int ldb, int k) const {
    check_tile(c, ldc, "c");
    multiply<kATransposed, kBTransposed>(c, ldc, accumulate, a, lda, b, ldb, k);
  }
  // Every warp's N accumulator tiles (the device keeps only its own, in registers).
  template <int N>
  struct Accumulators {
    std::vector<float> tiles = std::vector<float>(kernels::flash::kWarps * N * kTileElements);
    float* tile(int w, int m) { return tiles.data() + (w * N + m) * kTileElements; }
  };
  template <int N>
  void zero_accumulators(Accumulators<N>& acc, int w) const {
    std::fill(acc.tile(w, 0), acc.tile(w, 0) + N * kTileElements, 0.0f);
  }
  template <bool kATransposed, bool kBTransposed, int N>
  void accumulate(Accumulators<N>& acc, int w, int m, const bf16* a, int lda, const bf16* b, int ldb, int k) const {
    multiply<kATransposed, kBTransposed>(acc.tile(w, m), kernels::flash::kSide, true, a, lda, b, ldb, k);  // a register tile on the device
  }
  template <int N>
  void store_accumulator(Accumulators<N>& acc, int w, int m, float* c, int ldc) const {
    check_tile(c, ldc, "c");
    constexpr int kSide = kernels::flash::kSide;
    for (int i = 0; i < kSide; ++i) std::copy_n(acc.tile(w, m) + i * kSide, kSide, c + i * ldc);
  }

 private:
  // c [16][16] (ldc) = (accumulate ? c : 0) + op(a) op(b), the operands' layout checked.
  template <bool kATransposed, bool kBTransposed>
  static void multiply(float* c, int ldc, bool accumulate, const bf16* a, int lda, const bf16* b, int ldb, int k) {
    check_tile(a, lda, "a");
    check_tile(b, ldb, "b");
    check(k > 0 && k % kernels::flash::kSide == 0, "flash attention tile product: depth ", k,
          " is not a multiple of ", kernels::flash::kSide);
    constexpr int kSide = kernels::flash::kSide;
    for (int i = 0; i < kSide; ++i)
      for (int j = 0; j < kSide; ++j) {
        float sum = accumulate ? c[i * ldc + j] : 0.0f;
        for (int kk = 0; kk < k; ++kk) {
          const bf16 x = kATransposed ? a[kk * lda + i] : a[i * lda + kk];
          const bf16 y = kBTransposed ? b[j * ldb + kk] : b[kk * ldb + j];
          sum += kernels::bf16_bits_to_float(x.bits) * kernels::bf16_bits_to_float(y.bits);
        }
        c[i * ldc + j] = sum;
      }
  }

  static constexpr int kTileElements = kernels::flash::kSide * kernels::flash::kSide;
  template <typename T>
  static void check_tile(const T* p, int ld, const char* which) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    check(address % 32 == 0 && (static_cast<std::size_t>(ld) * sizeof(T)) % 16 == 0,
          "flash attention tile product: operand ", which, " at ", address % 128, " bytes past a 128-byte boundary",
          " with leading dimension ", ld, " (", sizeof(T), "-byte elements): the tensor cores need 32-byte aligned",
          " tiles and rows of whole 16 bytes");
  }
};

}  // namespace tripod::cpu
