// What cublasLtMatmul computes for a mapped call (backend/cuda/host/gemm_layout.h), on the host:
// the tests of the GEMM mapping and of the GEMMs attention is made of run the CUDA backend's
// exact arguments through it instead of cuBLASLt.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/host/gemm_layout.h"
#include "core/bf16.h"

namespace tripod::cuda::testing {

template <typename T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, bf16>) return bf16_to_float(x);
  else return static_cast<double>(x);
}

// In place (D = C), every matrix column-major: element (i, j) of a layout is at ptr[i + j * ld],
// matrix b of a batch starts batch_stride elements after matrix b - 1. It first checks what
// cuBLASLt checks (the layouts agree with m, n, k under the transposes; ld >= rows), so an
// inconsistent mapping fails here as cuBLASLt would reject it. Sums in double, rounded once;
// beta == 0 does not read C (BLAS and cuBLASLt semantics). A and B in TAB (bf16 for a bf16-operand
// product), C in TC.
template <typename TAB, typename TC = TAB>
void column_major_reference(const CublasLtGemm& g) {
  ASSERT_EQ(g.work, GemmWork::Matmul);
  const LtMatrix &la = g.a_layout, &lb = g.b_layout, &lc = g.c_layout;
  // op(lt_a) is [m, k], op(lt_b) is [k, n], C is [m, n].
  ASSERT_EQ(g.trans_lt_a ? la.cols : la.rows, g.m);
  ASSERT_EQ(g.trans_lt_a ? la.rows : la.cols, g.k);
  ASSERT_EQ(g.trans_lt_b ? lb.cols : lb.rows, g.k);
  ASSERT_EQ(g.trans_lt_b ? lb.rows : lb.cols, g.n);
  ASSERT_EQ(lc.rows, g.m);
  ASSERT_EQ(lc.cols, g.n);
  for (const LtMatrix* l : {&la, &lb, &lc}) ASSERT_GE(l->ld, std::max<int64_t>(1, l->rows));
  ASSERT_GE(g.batch_count, 1);
  for (int64_t batch = 0; batch < g.batch_count; ++batch) {
    const TAB* a = static_cast<const TAB*>(g.lt_a) + batch * la.batch_stride;
    const TAB* b = static_cast<const TAB*>(g.lt_b) + batch * lb.batch_stride;
    TC* c = static_cast<TC*>(g.c) + batch * lc.batch_stride;
    auto op_a = [&](int64_t i, int64_t p) { return g.trans_lt_a ? a[p + i * la.ld] : a[i + p * la.ld]; };
    auto op_b = [&](int64_t p, int64_t j) { return g.trans_lt_b ? b[j + p * lb.ld] : b[p + j * lb.ld]; };
    for (int64_t j = 0; j < g.n; ++j) {
      for (int64_t i = 0; i < g.m; ++i) {
        double sum = 0;
        for (int64_t p = 0; p < g.k; ++p) sum += as_double(op_a(i, p)) * as_double(op_b(p, j));
        TC& out = c[i + j * lc.ld];
        const double scaled_c = g.beta == 0 ? 0.0 : g.beta * static_cast<double>(out);
        out = static_cast<TC>(g.alpha * sum + scaled_c);
      }
    }
  }
}

}  // namespace tripod::cuda::testing
