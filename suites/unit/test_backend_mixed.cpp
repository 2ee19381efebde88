// Mixed dtypes on the backend under test: conversions round as core/bf16.h does, bf16 GEMMs are the
// exact products accumulated in fp32, and the vocabulary-window operations over the whole
// vocabulary give the unsplit kernels' results bit for bit.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/transfer.h"
#include "core/bf16.h"
#include "core/counter_rng.h"
#include "support/test_backend.h"

namespace tripod {
namespace {

std::vector<double> random_values(int64_t n, uint64_t seed, double scale) {
  const CounterRng rng(seed, "test.backend.mixed");
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * rng.normal(static_cast<uint64_t>(i));
  return v;
}

Tensor make(Backend& be, const std::vector<double>& values, DType dtype) {
  Tensor t = be.alloc({static_cast<int64_t>(values.size())}, dtype);
  from_host_f64(be, values, t);
  return t;
}

TEST(BackendConvert, RoundsToNearestEvenAndWidensExactly) {
  auto be = testing::make_test_backend();
  std::vector<double> values = random_values(4097, 1, 3.0);
  values.push_back(std::numeric_limits<double>::infinity());
  values.push_back(1.0 + 1.0 / 256);  // an fp32 tie for bf16
  const Tensor f64 = make(*be, values, DType::F64);
  const int64_t n = f64.numel();
  Tensor f32 = be->alloc({n}, DType::F32), b16 = be->alloc({n}, DType::BF16), back = be->alloc({n}, DType::F64);
  be->convert(f64, f32);
  be->convert(f64, b16);
  const std::vector<double> got32 = to_host_f64(*be, f32), got16 = to_host_f64(*be, b16);
  for (std::size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(got32[i], static_cast<double>(static_cast<float>(values[i])));
    ASSERT_EQ(got16[i], bf16_to_float(double_to_bf16(values[i]))) << values[i];
  }
  be->convert(f32, b16);
  const std::vector<double> from32 = to_host_f64(*be, b16);
  for (std::size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(from32[i], bf16_to_float(float_to_bf16(static_cast<float>(values[i]))));
  be->convert(b16, back);  // widening is exact
  EXPECT_EQ(to_host_f64(*be, back), from32);
  EXPECT_THROW(be->convert(f64, be->alloc({n}, DType::I32)), Error);
}

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
};

TEST(BackendGemm, Bf16InputsAccumulateInFp32WithFp32OrBf16Output) {
  auto be = testing::make_test_backend();
  for (const GemmCase& c : {GemmCase{false, true, 7, 5, 33}, GemmCase{true, false, 4, 9, 16}, GemmCase{false, false, 1, 1, 300},
                            GemmCase{true, true, 12, 3, 8}}) {
    const int64_t lda = (c.ta ? c.m : c.k) + 2, ldb = (c.tb ? c.k : c.n) + 1, ldc = c.n + 3;  // padded rows
    const int64_t a_rows = c.ta ? c.k : c.m, b_rows = c.tb ? c.n : c.k;
    std::vector<double> a = random_values(a_rows * lda, 2, 1.0), b = random_values(b_rows * ldb, 3, 1.0);
    for (double& x : a) x = bf16_to_float(double_to_bf16(x));  // the values bf16 can hold
    for (double& x : b) x = bf16_to_float(double_to_bf16(x));
    const Tensor A = make(*be, a, DType::BF16), B = make(*be, b, DType::BF16);
    const std::vector<double> c0 = random_values(c.m * ldc, 4, 1.0);
    Tensor C32 = make(*be, c0, DType::F32), C16 = make(*be, c0, DType::BF16);
    be->gemm(c.ta, c.tb, c.m, c.n, c.k, 1.5, A, lda, B, ldb, 0.5, C32, ldc, DType::F32);
    be->gemm(c.ta, c.tb, c.m, c.n, c.k, 1.5, A, lda, B, ldb, 0.5, C16, ldc, DType::F32);
    const std::vector<double> got32 = to_host_f64(*be, C32), got16 = to_host_f64(*be, C16);
    const std::vector<double> c0_32 = to_host_f64(*be, make(*be, c0, DType::F32));
    const std::vector<double> c0_16 = to_host_f64(*be, make(*be, c0, DType::BF16));
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double x = a[static_cast<std::size_t>(c.ta ? p * lda + i : i * lda + p)];
          const double y = b[static_cast<std::size_t>(c.tb ? j * ldb + p : p * ldb + j)];
          exact += x * y;  // bf16 products are exact in fp64, and these sums nearly so
          magnitude += std::fabs(x * y);
        }
        const std::size_t at = static_cast<std::size_t>(i * ldc + j);
        // fp32 accumulation: at most ~k+2 roundings of 2^-24 relative to the magnitudes involved.
        const double bound = (c.k + 4) * std::ldexp(1.0, -24) * (1.5 * magnitude + 0.5 * std::fabs(c0_32[at]));
        EXPECT_NEAR(got32[at], 1.5 * exact + 0.5 * c0_32[at], bound) << i << "," << j;
        const double bound16 = (c.k + 4) * std::ldexp(1.0, -24) * (1.5 * magnitude + 0.5 * std::fabs(c0_16[at])) +
                               std::ldexp(std::fabs(1.5 * exact + 0.5 * c0_16[at]), -8);  // + the final rounding
        EXPECT_NEAR(got16[at], 1.5 * exact + 0.5 * c0_16[at], bound16) << i << "," << j;
        EXPECT_EQ(got16[at], bf16_to_float(double_to_bf16(got16[at]))) << "a bf16 value";
      }
    // The padding between rows of C is not written.
    for (int64_t j = c.n; j < ldc; ++j) EXPECT_EQ(got32[static_cast<std::size_t>(j)], c0_32[static_cast<std::size_t>(j)]);
  }
  Tensor f = be->alloc({4}, DType::F32), h = be->alloc({4}, DType::BF16);
  EXPECT_THROW(be->gemm(false, false, 2, 2, 1, 1.0, f, 1, f, 2, 0.0, h, 2, DType::F32), Error);  // fp32 x fp32 -> bf16
  EXPECT_THROW(be->gemm(false, false, 2, 2, 1, 1.0, h, 1, h, 2, 0.0, f, 2, DType::BF16), Error);  // bf16 accumulation
}

// The window forms over the whole vocabulary {0, V, V} are the unsplit kernels, element for element.
TEST(BackendVocabWindow, TheWholeVocabularyGivesTheUnsplitKernelsBitForBit) {
  auto be = testing::make_test_backend();
  for (DType dt : {DType::F32, DType::F64}) {
    const int64_t N = 12, C = 70, V = 9, T = 4;  // C > 64: more than one column block
    const VocabWindow all{0, V, V};
    const int32_t tokens_host[N] = {0, 8, 3, 3, 1, 7, 2, 8, 5, 0, 4, 6};
    const int32_t targets_host[N] = {1, -1, 3, 8, 0, 2, -1, 5, 6, 7, 4, 3};
    Tensor tokens = be->alloc({N}, DType::I32), targets = be->alloc({N}, DType::I32);
    be->upload(tokens_host, tokens);
    be->upload(targets_host, targets);
    const Tensor wte = make(*be, random_values(V * C, 5, 1.0), dt).reshape({V, C});
    const Tensor wpe = make(*be, random_values(T * C, 6, 1.0), dt).reshape({T, C});
    Tensor unsplit = be->alloc({N, C}, dt), windowed = be->alloc({N, C}, dt);
    be->embedding_forward(unsplit, tokens, wte, wpe, T);
    be->embedding_lookup_window(windowed, tokens, wte, all);
    be->position_add(windowed, wpe, 0, T);
    EXPECT_EQ(to_host_f64(*be, unsplit), to_host_f64(*be, windowed)) << dtype_name(dt);

    const Tensor dout = make(*be, random_values(N * C, 7, 1.0), dt).reshape({N, C});
    Tensor dwte1 = be->alloc({V, C}, dt), dwpe1 = be->alloc({T, C}, dt);
    Tensor dwte2 = be->alloc({V, C}, dt), dwpe2 = be->alloc({T, C}, dt);
    be->embedding_backward(dwte1, dwpe1, dout, tokens, T);
    be->embedding_backward_window(dwte2, dwpe2, dout, tokens, all, T);
    EXPECT_EQ(to_host_f64(*be, dwte1), to_host_f64(*be, dwte2));
    EXPECT_EQ(to_host_f64(*be, dwpe1), to_host_f64(*be, dwpe2));

    const std::vector<double> logit_values = random_values(N * V, 8, 4.0);
    Tensor logits1 = make(*be, logit_values, dt).reshape({N, V}), logits2 = make(*be, logit_values, dt).reshape({N, V});
    Tensor losses1 = be->alloc({N}, dt), losses2 = be->alloc({N}, dt), lse = be->alloc({N}, dt);
    Tensor row_max = be->alloc({N}, dt), sums = be->alloc({2, N}, dt);
    be->cross_entropy_forward(losses1, logits1, targets);
    be->logits_row_max(row_max, logits2, targets, all);
    be->logits_exp_sums(sums, logits2, row_max, targets, all);
    be->cross_entropy_from_sums(losses2, lse, row_max, sums, targets);
    EXPECT_EQ(to_host_f64(*be, losses1), to_host_f64(*be, losses2));
    be->cross_entropy_backward(logits1, targets, 0.125);
    be->cross_entropy_backward_window(logits2, lse, targets, all, 0.125);
    EXPECT_EQ(to_host_f64(*be, logits1), to_host_f64(*be, logits2));
  }
}

// A window that does not hold a token contributes zeros; padding columns get no gradient.
TEST(BackendVocabWindow, OtherWindowsTokensAndPaddingContributeNothing) {
  auto be = testing::make_test_backend();
  const int64_t N = 3, C = 2, rows = 4;
  const VocabWindow window{4, 3, 7};  // ids 4, 5, 6; row 3 is padding
  const int32_t tokens_host[N] = {5, 1, 6};
  Tensor tokens = be->alloc({N}, DType::I32);
  be->upload(tokens_host, tokens);
  const Tensor wte = make(*be, {1, 2, 3, 4, 5, 6, 7, 8}, DType::F64).reshape({rows, C});
  Tensor out = be->alloc({N, C}, DType::F64);
  be->embedding_lookup_window(out, tokens, wte, window);
  EXPECT_EQ(to_host_f64(*be, out), (std::vector<double>{3, 4, 0, 0, 5, 6}));
  Tensor logits = make(*be, {1, 2, 3, 100, 4, 5, 6, 100, 7, 8, 9, 100}, DType::F64).reshape({N, rows});
  Tensor lse = make(*be, {5, 6, 10}, DType::F64), targets = be->alloc({N}, DType::I32);
  const int32_t targets_host[N] = {4, -1, 2};
  be->upload(targets_host, targets);
  be->cross_entropy_backward_window(logits, lse, targets, window, 1.0);
  const std::vector<double> g = to_host_f64(*be, logits);
  EXPECT_EQ(g[3], 0.0);                          // padding
  for (int j = 4; j < 8; ++j) EXPECT_EQ(g[static_cast<std::size_t>(j)], 0.0);  // ignored row
  EXPECT_EQ(g[0], std::exp(1.0 - 5) - 1.0);       // the target (id 4) is this window's column 0
  EXPECT_EQ(g[8], std::exp(7.0 - 10));            // target 2 is another window's
  const int32_t bad[N] = {5, 7, 6};
  be->upload(bad, tokens);
  try {
    be->embedding_lookup_window(out, tokens, wte, window);
    FAIL() << "token 7 is outside a vocabulary of 7";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 7 at position 1 is outside the vocabulary of 7"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tripod
