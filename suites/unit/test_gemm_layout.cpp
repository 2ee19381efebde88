// The row-major -> cuBLASLt mapping (backend/cuda/host/gemm_layout.h), tested without a GPU: a
// naive column-major GEMM written here does exactly what cublasLtMatmul does with the mapped
// pointers, transposes and layouts (rows, cols, ld, column-major), and must give what OpenBLAS's
// row-major GEMM (tripod::cpu::gemm) gives on the same buffers, padding untouched. Also the
// validation errors, the alignments promised to cuBLASLt, and the k == 0 path (C = beta * C).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/host/gemm_layout.h"
#include "column_major_gemm_reference.h"
#include "core/counter_rng.h"
#include "core/error.h"

namespace tripod::cuda {
namespace {

template <typename T>
std::vector<T> random_buffer(int64_t n, uint64_t seed) {
  const CounterRng rng(seed, "test.gemm_layout");
  std::vector<T> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(2 * rng.uniform(static_cast<uint64_t>(i)) - 1);
  return v;
}

using testing::column_major_reference;

// What cublaslt_gemm.cpp does for GemmWork::ScaleC and ZeroC: scale each run of C's memory by
// beta, or set it to zero.
template <typename T>
void scale_runs_reference(const CublasLtGemm& g) {
  ASSERT_TRUE(g.work == GemmWork::ScaleC || g.work == GemmWork::ZeroC);
  const ScaleRuns runs = scale_c_runs(g);
  T* c = static_cast<T*>(g.c);
  for (int64_t r = 0; r < runs.runs; ++r)
    for (int64_t i = 0; i < runs.run_length; ++i)
      c[r * runs.stride + i] = g.work == GemmWork::ZeroC ? T(0) : c[r * runs.stride + i] * static_cast<T>(g.beta);
}

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k, pad;  // every leading dimension is its row length + pad
  double alpha, beta;
  std::string str() const {
    return str_cat(trans_a ? "T" : "N", trans_b ? "T" : "N", " m=", m, " n=", n, " k=", k, " pad=", pad, " alpha=", alpha,
                   " beta=", beta);
  }
};

// Runs the case through OpenBLAS (row-major, the CPU backend's GEMM) and through the mapping plus
// the column-major reference on copies of the same buffers; returns the largest difference over
// every element of C's buffer (padding included: neither may touch it) relative to C's largest
// element.
template <typename T>
double mapped_vs_openblas(const Case& t, uint64_t seed) {
  const int64_t a_rows = t.trans_a ? t.k : t.m, a_len = t.trans_a ? t.m : t.k;
  const int64_t b_rows = t.trans_b ? t.n : t.k, b_len = t.trans_b ? t.k : t.n;
  const int64_t lda = a_len + t.pad, ldb = b_len + t.pad, ldc = t.n + t.pad;
  // Full rows (ld each) so the padding after the last row is there to be checked too.
  const std::vector<T> a = random_buffer<T>(a_rows * lda, seed);
  const std::vector<T> b = random_buffer<T>(b_rows * ldb, seed + 1);
  const std::vector<T> c0 = random_buffer<T>(t.m * ldc, seed + 2);
  std::vector<T> want = c0, got = c0;
  cpu::gemm<T>(t.trans_a, t.trans_b, t.m, t.n, t.k, static_cast<T>(t.alpha), a.data(), lda, b.data(), ldb,
               static_cast<T>(t.beta), want.data(), ldc);
  const RowMajorGemm call{t.trans_a, t.trans_b, t.m,        t.n, t.k,       t.alpha,  t.beta, a.data(),
                          lda,       b.data(),  ldb,        got.data(), ldc, sizeof(T), sizeof(T)};
  const CublasLtGemm lt = map_row_major_gemm(call, "gemm");
  column_major_reference<T>(lt);
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(want[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  }
  return largest > 0 ? worst / largest : worst;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int64_t sizes[] = {1, 3, 17, 64};
  const double scalars[][2] = {{1.0, 0.0}, {0.75, 1.0}, {-1.5, 0.5}};  // alpha, beta
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : sizes)
            for (int64_t pad : {0, 5})
              for (const auto& s : scalars) cases.push_back({ta, tb, m, n, k, pad, s[0], s[1]});
  return cases;
}

TEST(GemmLayout, ColumnMajorCallOnMappedArgumentsMatchesOpenBlasFp64) {
  // fp64: both sum at most 64 products of values in [-1, 1) in fp64, in different orders; the
  // difference is a few ulps of the largest partial sum (~1e-15 relative); 1e-13 leaves room for
  // k = 64 while any wrong index (a swapped operand, transpose or ld) is off by O(1).
  uint64_t seed = 100;
  for (const Case& t : all_cases()) {
    EXPECT_LE(mapped_vs_openblas<double>(t, seed), 1e-13) << t.str();
    seed += 3;
  }
}

TEST(GemmLayout, ColumnMajorCallOnMappedArgumentsMatchesOpenBlasFp32) {
  // fp32: the reference sums in fp64 and rounds once, OpenBLAS sums in fp32 (k <= 64 terms), so
  // they differ by about k * 2^-24 relative to the sum of |products|: 1e-5 covers k = 64.
  uint64_t seed = 9000;
  for (const Case& t : all_cases()) {
    EXPECT_LE(mapped_vs_openblas<float>(t, seed), 1e-5) << t.str();
    seed += 3;
  }
}

void expect_error(const RowMajorGemm& call, const std::vector<std::string>& parts) {
  try {
    map_row_major_gemm(call, "gemm");
    ADD_FAILURE() << "expected an error mentioning " << parts.front();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what << " lacks " << p;
  }
}

// A strided batch: each matrix of the batch as OpenBLAS computes it alone, the gaps between C's
// matrices untouched (strides larger than a matrix's span leave gaps to check).
TEST(GemmLayout, StridedBatchMatchesOpenBlasMatrixByMatrix) {
  uint64_t seed = 500;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t batch : {1, 3}) {
        const int64_t m = 5, n = 4, k = 6, pad = 2, gap = 7;
        const int64_t a_rows = ta ? k : m, a_len = ta ? m : k, b_rows = tb ? n : k, b_len = tb ? k : n;
        const int64_t lda = a_len + pad, ldb = b_len + pad, ldc = n + pad;
        const int64_t sa = a_rows * lda + gap, sb = b_rows * ldb + gap, sc = m * ldc + gap;
        const std::vector<double> a = random_buffer<double>(batch * sa, seed), b = random_buffer<double>(batch * sb, seed + 1);
        const std::vector<double> c0 = random_buffer<double>(batch * sc, seed + 2);
        seed += 3;
        std::vector<double> want = c0, got = c0;
        for (int64_t i = 0; i < batch; ++i)
          cpu::gemm<double>(ta, tb, m, n, k, 0.5, a.data() + i * sa, lda, b.data() + i * sb, ldb, 0.0,
                            want.data() + i * sc, ldc);
        RowMajorGemm call{ta, tb, m, n, k, 0.5, 0.0, a.data(), lda, b.data(), ldb, got.data(), ldc, 8, 8};
        call.batch_count = batch;
        call.stride_a = sa;
        call.stride_b = sb;
        call.stride_c = sc;
        const CublasLtGemm lt = map_row_major_gemm(call, "gemm");
        EXPECT_EQ(lt.batch_count, batch);
        // One product: cuBLASLt gets no strides; several: each operand its own (A and B swapped).
        EXPECT_EQ(lt.a_layout.batch_stride, batch > 1 ? sb : 0);
        EXPECT_EQ(lt.b_layout.batch_stride, batch > 1 ? sa : 0);
        EXPECT_EQ(lt.c_layout.batch_stride, batch > 1 ? sc : 0);
        column_major_reference<double>(lt);
        double worst = 0;
        for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
        EXPECT_LE(worst, 1e-14) << (ta ? "T" : "N") << (tb ? "T" : "N") << " batch " << batch;
      }
}

TEST(GemmLayout, BatchStridesJoinTheAlignmentAndOverlappingOutputsAreErrors) {
  auto at = [](uintptr_t address) { return reinterpret_cast<const void*>(address); };
  RowMajorGemm call{false, false, 4, 8, 8, 1.0, 0.0, at(0x1000), 8, at(0x2000), 8,
                    reinterpret_cast<void*>(0x3000), 8, 4, 4};
  call.batch_count = 2;
  call.stride_a = 4 * 8 + 1;  // 33 elements = 132 bytes: every other A starts 4-byte aligned
  call.stride_b = 64;         // 256 bytes
  call.stride_c = 40;         // 160 bytes: 32-byte aligned
  const CublasLtGemm lt = map_row_major_gemm(call, "gemm");
  EXPECT_EQ(lt.b_layout.alignment_bytes, 4u);   // caller's A
  EXPECT_EQ(lt.a_layout.alignment_bytes, 32u);  // caller's B: ld 8 * 4 bytes = 32 decides
  EXPECT_EQ(lt.c_layout.alignment_bytes, 32u);
  call.batch_count = 1;  // one product: the strides mean nothing
  EXPECT_EQ(map_row_major_gemm(call, "gemm").b_layout.alignment_bytes, 32u);

  double x[1];
  RowMajorGemm overlap{false, false, 4, 5, 6, 1, 0, x, 6, x, 5, x, 5, 8, 8};
  overlap.batch_count = 2;
  overlap.stride_c = 19;  // C spans 3 * 5 + 5 = 20 elements
  expect_error(overlap, {"gemm", "overlap", "stride_c = 19", "span 20", "batch of 2"});
  overlap.stride_c = 20;
  EXPECT_NO_THROW(map_row_major_gemm(overlap, "gemm"));
  overlap.stride_a = -1;
  expect_error(overlap, {"negative batch stride", "A -1"});
  overlap.stride_a = 0;  // a shared A (stride 0) is allowed: it is only read
  overlap.batch_count = -1;
  expect_error(overlap, {"batch count -1"});
  overlap.batch_count = int64_t{1} << 31;
  expect_error(overlap, {"batch count 2147483648", "2^31 - 1"});
  overlap.batch_count = 0;
  EXPECT_EQ(map_row_major_gemm(overlap, "gemm").work, GemmWork::Nothing);
}

TEST(GemmLayout, SwapsOperandsAndSizesKeepsTransposes) {
  double a[1], b[1], c[1];
  const RowMajorGemm call{true, false, 7, 5, 3, 2.0, 0.5, a, 7, b, 5, c, 9, 8, 8};
  const CublasLtGemm lt = map_row_major_gemm(call, "gemm");
  EXPECT_TRUE(lt.lt_a_is_callers_b);
  EXPECT_EQ(lt.lt_a, static_cast<const void*>(b));
  EXPECT_EQ(lt.lt_b, static_cast<const void*>(a));
  EXPECT_EQ(lt.c, static_cast<void*>(c));
  EXPECT_FALSE(lt.trans_lt_a);  // the caller's trans_b
  EXPECT_TRUE(lt.trans_lt_b);   // the caller's trans_a
  EXPECT_EQ(lt.m, 5);
  EXPECT_EQ(lt.n, 7);
  EXPECT_EQ(lt.k, 3);
  // B stored [3, 5] row-major ld 5 -> column-major 5 x 3; A stored [3, 7] (transposed) -> 7 x 3;
  // C stored [7, 5] ld 9 -> 5 x 7 ld 9.
  EXPECT_EQ(lt.a_layout.rows, 5);
  EXPECT_EQ(lt.a_layout.cols, 3);
  EXPECT_EQ(lt.a_layout.ld, 5);
  EXPECT_EQ(lt.b_layout.rows, 7);
  EXPECT_EQ(lt.b_layout.cols, 3);
  EXPECT_EQ(lt.b_layout.ld, 7);
  EXPECT_EQ(lt.c_layout.rows, 5);
  EXPECT_EQ(lt.c_layout.cols, 7);
  EXPECT_EQ(lt.c_layout.ld, 9);
  EXPECT_EQ(lt.alpha, 2.0);
  EXPECT_EQ(lt.beta, 0.5);
  EXPECT_EQ(lt.work, GemmWork::Matmul);
}

TEST(GemmLayout, AlignmentIsTheLowestPowerOfTwoOfAddressAndLeadingDimensionCappedAt256) {
  auto at = [](uintptr_t address) { return reinterpret_cast<const void*>(address); };
  EXPECT_EQ(gemm_alignment_bytes(at(0x10000), 768, 2), 256u);  // 1536 bytes = 512 * 3: capped
  EXPECT_EQ(gemm_alignment_bytes(at(0x10008), 768, 2), 8u);    // the address decides
  EXPECT_EQ(gemm_alignment_bytes(at(0x10000), 7, 4), 4u);      // the ld decides: 28 bytes
  EXPECT_EQ(gemm_alignment_bytes(at(0x10000), 17, 2), 2u);     // bf16, odd ld
  EXPECT_EQ(gemm_alignment_bytes(at(0x10000), 24, 2), 16u);    // 48 bytes
  EXPECT_EQ(gemm_alignment_bytes(nullptr, 0, 8), 256u);
  // Each operand's own address, ld and element size.
  const RowMajorGemm call{false, false, 4, 6, 8, 1.0, 0.0, at(0x1000), 8, at(0x2004), 6, nullptr, 6, 2, 4};
  const CublasLtGemm lt = map_row_major_gemm(call, "gemm");
  EXPECT_EQ(lt.a_layout.alignment_bytes, 4u);   // caller's B: address 0x2004
  EXPECT_EQ(lt.b_layout.alignment_bytes, 16u);  // caller's A: 8 * 2 bytes
  EXPECT_EQ(lt.c_layout.alignment_bytes, 8u);   // 6 * 4 bytes = 24
}

TEST(GemmLayout, PaddedLeadingDimensionsKeepEveryRowAtA16ByteBoundary) {
  EXPECT_EQ(padded_leading_dimension(50257, 2), 50264);  // GPT-2's vocabulary, bf16: 8 a boundary
  EXPECT_EQ(padded_leading_dimension(50257, 4), 50260);  // fp32: 4 a boundary
  EXPECT_EQ(padded_leading_dimension(768, 2), 768);      // already aligned: unchanged
  EXPECT_EQ(padded_leading_dimension(1, 8), 2);
  EXPECT_EQ(padded_leading_dimension(0, 2), 0);
  EXPECT_EQ(padded_leading_dimension(5, 16), 5);  // 16-byte elements align anyway
  for (int64_t len = 1; len < 70; ++len)
    for (std::size_t bytes : {2u, 4u, 8u}) {
      const int64_t ld = padded_leading_dimension(len, bytes);
      EXPECT_GE(ld, len);
      EXPECT_LT(ld - len, static_cast<int64_t>(16 / bytes));
      EXPECT_GE(gemm_alignment_bytes(reinterpret_cast<const void*>(0x1000), ld, bytes), kTensorCoreAlignmentBytes);
    }
}

TEST(GemmLayout, WorkFollowsTheSizesAsOpenBlasDoes) {
  double buf[64] = {};
  auto work = [&](int64_t m, int64_t n, int64_t k, double beta) {
    return map_row_major_gemm({false, false, m, n, k, 1.0, beta, buf, 8, buf, 8, buf, 8, 8, 8}, "gemm").work;
  };
  EXPECT_EQ(work(0, 4, 4, 0.5), GemmWork::Nothing);
  EXPECT_EQ(work(4, 0, 4, 0.5), GemmWork::Nothing);
  EXPECT_EQ(work(4, 4, 0, 1.0), GemmWork::Nothing);
  EXPECT_EQ(work(4, 4, 0, 0.5), GemmWork::ScaleC);
  EXPECT_EQ(work(4, 4, 0, 0.0), GemmWork::ZeroC);
  EXPECT_EQ(work(4, 4, 4, 0.0), GemmWork::Matmul);
}

TEST(GemmLayout, EmptyProductScalesCLikeOpenBlasAndLeavesPaddingAlone) {
  // k == 0: OpenBLAS computes C = beta * C; the scale runs must do the same and skip the padding.
  for (int64_t pad : {0, 3})
    for (int64_t m : {1, 5})
      for (double beta : {0.0, -0.5, 2.0}) {
        const int64_t n = 7, ldc = n + pad;
        const std::vector<double> c0 = random_buffer<double>(m * ldc, 77);
        std::vector<double> want = c0, got = c0;
        double unused = 0;
        cpu::gemm<double>(false, false, m, n, 0, 1.0, &unused, 1, &unused, n, beta, want.data(), ldc);
        const CublasLtGemm lt =
            map_row_major_gemm({false, false, m, n, 0, 1.0, beta, &unused, 0, &unused, n, got.data(), ldc, 8, 8}, "gemm");
        scale_runs_reference<double>(lt);
        EXPECT_EQ(got, want) << "m=" << m << " pad=" << pad << " beta=" << beta;  // one multiply each: exact
      }
}

TEST(GemmLayout, EmptyProductWithBetaZeroOverwritesNanAndInfinityLikeOpenBlas) {
  // A recycled C may hold anything: BLAS never reads C when beta == 0, so 0 * NaN must not appear.
  for (int64_t pad : {0, 3}) {
    const int64_t m = 4, n = 5, ldc = n + pad;
    std::vector<double> c0 = random_buffer<double>(m * ldc, 78);
    c0[1] = std::nan("");
    c0[ldc + 2] = -INFINITY;
    if (pad) c0[n] = std::nan("");  // padding: left as it was
    std::vector<double> want = c0, got = c0;
    double unused = 0;
    cpu::gemm<double>(false, false, m, n, 0, 1.0, &unused, 1, &unused, n, 0.0, want.data(), ldc);
    const CublasLtGemm lt =
        map_row_major_gemm({false, false, m, n, 0, 1.0, 0.0, &unused, 0, &unused, n, got.data(), ldc, 8, 8}, "gemm");
    scale_runs_reference<double>(lt);
    for (int64_t i = 0; i < m * ldc; ++i) {
      const bool padding = i % ldc >= n;
      EXPECT_EQ(want[i] == 0, !padding) << "OpenBLAS itself, element " << i;
      EXPECT_TRUE(std::memcmp(&got[i], &want[i], sizeof(double)) == 0) << "element " << i << ": " << got[i] << " vs "
                                                                          << want[i];
    }
  }
}

TEST(GemmLayout, ScaleRunsAreOneSpanWhenContiguous) {
  double buf[1] = {};
  const CublasLtGemm tight = map_row_major_gemm({false, false, 5, 7, 0, 1.0, 2.0, buf, 0, buf, 7, buf, 7, 8, 8}, "gemm");
  EXPECT_EQ(scale_c_runs(tight).runs, 1);
  EXPECT_EQ(scale_c_runs(tight).run_length, 35);
  const CublasLtGemm padded = map_row_major_gemm({false, false, 5, 7, 0, 1.0, 2.0, buf, 0, buf, 7, buf, 9, 8, 8}, "gemm");
  EXPECT_EQ(scale_c_runs(padded).runs, 5);
  EXPECT_EQ(scale_c_runs(padded).run_length, 7);
  EXPECT_EQ(scale_c_runs(padded).stride, 9);
  const CublasLtGemm one_row = map_row_major_gemm({false, false, 1, 7, 0, 1.0, 2.0, buf, 0, buf, 7, buf, 9, 8, 8}, "gemm");
  EXPECT_EQ(scale_c_runs(one_row).runs, 1);
  EXPECT_EQ(scale_c_runs(one_row).run_length, 7);
}

TEST(GemmLayout, LeadingDimensionsShorterThanTheStoredRowAreErrorsNamingTheOperand) {
  double x[1];
  // A [4, 6] needs lda >= 6; transposed, A is stored [6, 4] and needs lda >= 4.
  expect_error({false, false, 4, 5, 6, 1, 0, x, 5, x, 5, x, 5, 8, 8},
               {"gemm", "lda = 5", "row length 6", "A stored as [4, 6]", "m = 4", "n = 5", "k = 6"});
  expect_error({true, false, 4, 5, 6, 1, 0, x, 3, x, 5, x, 5, 8, 8}, {"lda = 3", "A stored as [6, 4] (transposed)"});
  EXPECT_NO_THROW(map_row_major_gemm({true, false, 4, 5, 6, 1, 0, x, 4, x, 5, x, 5, 8, 8}, "gemm"));
  // B [6, 5] needs ldb >= 5; transposed, stored [5, 6], ldb >= 6.
  expect_error({false, false, 4, 5, 6, 1, 0, x, 6, x, 4, x, 5, 8, 8}, {"ldb = 4", "B stored as [6, 5]"});
  expect_error({false, true, 4, 5, 6, 1, 0, x, 6, x, 5, x, 5, 8, 8}, {"ldb = 5", "B stored as [5, 6] (transposed)"});
  // C [4, 5] needs ldc >= 5.
  expect_error({false, false, 4, 5, 6, 1, 0, x, 6, x, 5, x, 4, 8, 8}, {"ldc = 4", "C stored as [4, 5]"});
}

TEST(GemmLayout, NegativeSizesAndZeroElementSizesAreErrors) {
  double x[1];
  expect_error({false, false, -1, 5, 6, 1, 0, x, 6, x, 5, x, 5, 8, 8}, {"gemm", "negative size", "m = -1"});
  expect_error({false, false, 4, 5, -6, 1, 0, x, 6, x, 5, x, 5, 8, 8}, {"k = -6"});
  expect_error({false, false, 4, 5, 6, 1, 0, x, 6, x, 5, x, 5, 0, 8}, {"element sizes"});
}

TEST(GemmLayout, OperandSpanCoversTheLastRowOnly) {
  EXPECT_EQ(gemm_operand_span(4, 6, 10), 36);  // 3 full strides + the last row
  EXPECT_EQ(gemm_operand_span(1, 6, 10), 6);
  EXPECT_EQ(gemm_operand_span(0, 6, 10), 0);
  EXPECT_EQ(gemm_operand_span(4, 0, 10), 0);
}

}  // namespace
}  // namespace tripod::cuda

namespace tripod::cuda {
namespace {

// cuBLASLt's bias epilogue adds bias[i] to row i of its column-major D, for every column. The
// mapping swaps the operands, so D's rows are the row-major C's columns: the epilogue applied to
// the mapped call must equal OpenBLAS's row-major GEMM followed by bias_add (bias[j] on column j),
// bit for bit in fp32 where the product itself agrees (k = 1: one product, no sum order).
TEST(GemmLayout, BiasEpilogueRunsAlongTheRowMajorColumns) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t pad : {0, 4}) {
        const int64_t m = 5, n = 12, k = 1;
        const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        const std::vector<float> a = random_buffer<float>((ta ? k : m) * lda, 71);
        const std::vector<float> b = random_buffer<float>((tb ? n : k) * ldb, 72);
        const std::vector<float> bias = random_buffer<float>(n, 73);
        std::vector<float> want(static_cast<std::size_t>(m * ldc), 7.0f), got = want;
        cpu::gemm<float>(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, want.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) want[static_cast<std::size_t>(i * ldc + j)] += bias[static_cast<std::size_t>(j)];
        const RowMajorGemm call{ta, tb, m, n, k, 1.0, 0.0, a.data(), lda, b.data(), ldb, got.data(), ldc,
                                sizeof(float), sizeof(float)};
        const CublasLtGemm lt = map_row_major_gemm(call, "gemm");
        column_major_reference<float>(lt);
        float* d = static_cast<float*>(lt.c);
        for (int64_t col = 0; col < lt.n; ++col)  // the epilogue: bias[row] on each of D's rows
          for (int64_t row = 0; row < lt.m; ++row) d[row + col * lt.c_layout.ld] += bias[static_cast<std::size_t>(row)];
        EXPECT_EQ(got, want) << (ta ? "T" : "N") << (tb ? "T" : "N") << " pad " << pad;
      }
}

TEST(GemmLayout, BiasEpilogueOnlyWhereItGivesTheBitsOfASeparateAddition) {
  alignas(16) float storage[8] = {};
  float c[4] = {};
  const float a[4] = {}, b[4] = {};
  const RowMajorGemm plain{false, false, 2, 2, 2, 1.0, 0.0, a, 2, b, 2, c, 2, sizeof(float), sizeof(float)};
  EXPECT_TRUE(bias_epilogue_applies(plain, storage));
  EXPECT_FALSE(bias_epilogue_applies(plain, nullptr));
  EXPECT_FALSE(bias_epilogue_applies(plain, storage + 1)) << "4-byte aligned bias";
  RowMajorGemm other = plain;
  other.beta = 1.0;  // the epilogue would add into alpha * AB + beta * C before its one rounding
  EXPECT_FALSE(bias_epilogue_applies(other, storage));
  // ... which a residual read as C accepts (gemm_bias_residual); the other conditions stay
  EXPECT_TRUE(bias_epilogue_applies(other, storage, false));
  EXPECT_FALSE(bias_epilogue_applies(other, storage + 1, false)) << "4-byte aligned bias";
  other.c_element_bytes = 2;
  EXPECT_FALSE(bias_epilogue_applies(other, storage, false)) << "a bf16 C";
  other = plain;
  other.alpha = 0.5;
  EXPECT_FALSE(bias_epilogue_applies(other, storage));
  other = plain;
  other.c_element_bytes = 2;  // a bf16 C: the fp32 sum rounded once (Backend::gemm_bias's bf16 c)
  EXPECT_TRUE(bias_epilogue_applies(other, storage));
  EXPECT_FALSE(bias_epilogue_applies(other, storage + 1)) << "4-byte aligned bias";
  other.alpha = 0.5;
  EXPECT_FALSE(bias_epilogue_applies(other, storage)) << "a bf16 C with alpha != 1";
  other = plain;
  other.batch_count = 2;
  EXPECT_FALSE(bias_epilogue_applies(other, storage));
  other = plain;
  other.k = 0;  // no product: cublaslt_gemm.cpp zeroes C and the caller adds the bias
  EXPECT_FALSE(bias_epilogue_applies(other, storage));
}

}  // namespace
}  // namespace tripod::cuda
